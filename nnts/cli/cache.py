"""``nnts cache [clear]``: where nnts keeps decoded test-vector files between runs (``NNTS_CACHE_DIR``,
else ``$XDG_CACHE_HOME/nnts``, else ``~/.cache/nnts``; an empty ``NNTS_CACHE_DIR`` for none), how
much it holds, and its removal."""
from __future__ import annotations

from nnts.runners import vector_cache


def register(sub) -> None:
    p = sub.add_parser("cache", help="where nnts caches decoded test vectors and its size; 'clear' removes it")
    p.add_argument("action", nargs="?", choices=("show", "clear"), default="show",
                   help="show (the default): the folder and its size; clear: remove every entry")
    p.set_defaults(func=run)


def run(args) -> int:
    folder = args.settings.cache_dir
    if folder is None:
        print("nnts cache: no cache (NNTS_CACHE_DIR is set and empty)")
        return 0
    if args.action == "clear":
        removed, size = vector_cache.clear(folder)
        print(f"nnts cache: removed {removed} entries ({size / 2 ** 20:.1f} MiB) from {folder}")
        return 0
    found = vector_cache.entries(folder)
    size = sum(st.st_size for _, st in found)
    print(f"nnts cache: {folder}: {len(found)} entries, {size / 2 ** 20:.1f} MiB (kept under "
          f"{vector_cache.LIMIT >> 20} MiB, least recently used removed first; 'nnts cache clear' removes them)")
    return 0
