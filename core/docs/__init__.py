"""Documentation an agent can search by keyword and read: the API of the installed kernel libraries (CuTe DSL,
Triton, chosen torch modules) taken from their sources without importing them, the files those packages ship,
the folders a run lists under ``[docs] paths`` and the project's protocol.

``core.docs.index`` finds the sources and cuts them into chunks (a markdown section, one API entry);
``core.docs.search`` ranks chunks for a query (BM25 over identifier-split tokens); ``core.docs.library`` holds the
per-process index and renders search results and readings as bounded text. Nothing here depends on the LLM code.
"""
