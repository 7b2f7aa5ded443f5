"""Hugging Face: resolve a repo to a commit, choose its files, download them resumably, verify them.

Files land in huggingface_hub's standard cache (HF_HOME / HF_HUB_CACHE, `blobs/` + `snapshots/<sha>/`),
so other Hugging Face tools share them. The one thing done by hand is the transfer of a blob:
huggingface_hub 2.x retries a broken stream within one run but deletes the partial file when the
process dies, so a killed pull would start again from zero. Here the partial bytes stay in
`blobs/<etag>.incomplete` (the name older huggingface_hub versions resumed from), the next run continues
with a Range request, and the whole file is checked against the hub's sha256 before it is used.

The parts, each depending only on `llmcli.errors` and on each other:
  spec      REPO[:QUANT], `hf.co/` and URL forms, quant tags in file names (pure)
  choose    which files of a repo listing to fetch: a GGUF quant, or a checkpoint's inputs (pure)
  errors    the hub's failures, each a one-line message naming the fix
  events    the progress records a pull reports (the package never prints)
  remote    settings from huggingface_hub's constants, resolve a revision, offline fallback
  plan      what a pull would fetch and what is already on disk (what --dry-run shows)
  transfer  resumable download, verify, link into the cache, the free-space check

Pull -> convert -> register, which needs the store and the converter, is `llmcli.usecases.pull`.
"""
