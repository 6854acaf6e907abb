// Search as you type: completions from /v1/suggest offered in a <datalist> under the search box.
// Same origin, no library, nothing inline (the pages' CSP allows script-src 'self' only).
// Without it the page is the same form, typed by hand: nothing here is needed to search.
(function () {
  "use strict";
  var DELAY_MS = 120; // a pause in typing, not every key: fewer requests, none stale
  var SIZE = 8;
  var MAX_TYPED = 500; // /v1/suggest's bound on q: past it, a query is typed, not completed
  var input = document.querySelector("form.search input[name=q]");
  if (!input || !window.fetch || !window.AbortController) {
    return;
  }
  var list = document.getElementById("suggestions");
  if (!list) {
    list = document.createElement("datalist");
    list.id = "suggestions";
    input.insertAdjacentElement("afterend", list);
  }
  input.setAttribute("list", list.id);
  input.setAttribute("autocomplete", "off"); // the browser's own history would hide ours
  var timer = null;
  var running = null;
  var asked = input.value;

  function offered(text) {
    return Array.prototype.some.call(list.options, function (option) {
      return option.value === text;
    });
  }

  function fill(texts) {
    var options = document.createDocumentFragment();
    texts.forEach(function (text) {
      var option = document.createElement("option");
      option.value = text;
      options.appendChild(option);
    });
    list.replaceChildren(options);
  }

  function ask(q) {
    if (running) {
      running.abort(); // its answer is for text no longer in the box
    }
    if (!q.trim() || q.length > MAX_TYPED) {
      running = null;
      fill([]);
      return;
    }
    var request = new AbortController();
    running = request;
    fetch("/v1/suggest?size=" + SIZE + "&q=" + encodeURIComponent(q), {
      signal: request.signal,
      headers: { Accept: "application/json" },
    })
      .then(function (response) {
        return response.ok ? response.json() : null;
      })
      .then(function (body) {
        if (running !== request || !body) {
          return;
        }
        running = null;
        fill(
          body.suggestions.map(function (s) {
            return s.text;
          })
        );
      })
      .catch(function () {
        // aborted, offline or refused: the box keeps working without suggestions
      });
  }

  input.addEventListener("input", function () {
    var q = input.value;
    if (q === asked || offered(q)) {
      return; // a suggestion was chosen: it is in the box, nothing to ask
    }
    asked = q;
    clearTimeout(timer);
    timer = setTimeout(function () {
      ask(q);
    }, DELAY_MS);
  });
})();
