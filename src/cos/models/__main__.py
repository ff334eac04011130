"""Command line: `python -m cos.models {pull,list,path}`.

    python -m cos.models list
    python -m cos.models pull qwen2.5-coder-0.5b-instruct [more names] [--cache-dir DIR] [--dtype bfloat16]
    python -m cos.models path qwen2.5-coder-0.5b-instruct   # prints the folder, exit 1 if absent

Errors from the pull (unknown name, pip, checksum, disk) are printed as one readable message with
exit status 1, not a traceback: they are meant to be acted on by a person.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from cos.models.convert import DTYPES
from cos.models.errors import PackagedModelError
from cos.models.packaged import PACKAGED, packaged_model_dir, pull, resolve_cache_dir
from cos.models.registry import get_packaged


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cos.models", description=__doc__.splitlines()[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    names = sorted(PACKAGED)
    p_pull = sub.add_parser("pull", help="install, assemble, verify and convert a packaged model")
    p_pull.add_argument("names", nargs="+", metavar="name", help=f"one or more of: {', '.join(names)}")
    p_pull.add_argument(
        "--dtype", choices=DTYPES, default="bfloat16", help="dtype of the saved weights"
    )
    p_pull.add_argument(
        "--force", action="store_true", help="convert again even if already present"
    )
    p_list = sub.add_parser("list", help="known models, whether converted, and where")
    p_path = sub.add_parser("path", help="print the converted folder of a model")
    p_path.add_argument("name", help=f"one of: {', '.join(names)}")
    for p in (p_pull, p_list, p_path):
        p.add_argument(
            "--cache-dir", default=None, help="default: $COS_MODEL_CACHE or ~/.cache/cos/models"
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "list":
            cache = resolve_cache_dir(args.cache_dir)
            print(f"cache: {cache}")
            for name, model in sorted(PACKAGED.items()):
                folder = packaged_model_dir(name, cache)
                state = "installed" if folder else "absent"
                print(f"{name:30s} {state:9s} {model.size / 1e6:7.0f} MB GGUF  {cache / name}")
        elif args.command == "path":
            folder = packaged_model_dir(args.name, args.cache_dir)
            if folder is None:
                print(
                    f"{args.name} is not converted; run: python -m cos.models pull {args.name}",
                    file=sys.stderr,
                )
                return 1
            print(folder)
        else:
            for name in args.names:  # every name checked before the first download
                get_packaged(name)
            for name in args.names:
                print(pull(name, args.cache_dir, dtype=args.dtype, force=args.force))
    except PackagedModelError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
