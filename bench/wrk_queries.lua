-- wrk script: rotate through a query file (one URL-encoded query a line), each thread
-- starting at its own offset (plus START_AT, so successive runs read different stretches);
-- done() prints the latency percentiles as one JSON line.
-- Usage: QUERIES=file PATH_PREFIX="/v1/search?ranker=bm25&q=" wrk -s wrk_queries.lua URL

local queries = {}
local prefix = os.getenv("PATH_PREFIX") or "/v1/search?q="
for line in io.lines(os.getenv("QUERIES")) do
  queries[#queries + 1] = line
end

local counter = 0
local threads = {}

function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
  table.insert(threads, thread)
end

function init(args)
  i = id * 37 + (tonumber(os.getenv("START_AT")) or 0)
  bad = 0
end

function request()
  i = i + 1
  return wrk.format("GET", prefix .. queries[(i % #queries) + 1])
end

function response(status, headers, body)
  if status >= 500 or status == 429 then
    bad = bad + 1
  end
end

function done(summary, latency, requests)
  local errors = 0
  for _, t in ipairs(threads) do
    errors = errors + (t:get("bad") or 0)
  end
  local e = summary.errors
  errors = errors + e.connect + e.read + e.write + e.status + e.timeout
  io.write(string.format(
    'WRK_JSON {"requests": %d, "duration_us": %d, "p50_us": %d, "p95_us": %d, "p99_us": %d, "mean_us": %f, "errors": %d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(95),
    latency:percentile(99), latency.mean, errors))
end
