"""Pages that reach the docstore without Trawl's crawler: WARC/ARC archives and JSON Lines.

Both write a crawl data directory (``core.crawldir``) that ``trawl index --data`` builds
from, through the crawler's own extraction, canonicalisation and dedup.
"""
