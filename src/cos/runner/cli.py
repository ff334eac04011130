"""Entry-point glue for main_dataset.py / main_case.py: .env, argument pre-checks, one-line errors.

Errors a user can fix (bad keys or values, unknown dataset or method, missing models) print one
line `error: ...` to stderr and exit with code 2, without a traceback (COS_TRACEBACK=1 shows it).
Results already written are never lost: an interrupted or failed run says how to resume.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from dotenv import find_dotenv, load_dotenv
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from .results import RESULTS
from .schema import ANY, SCHEMA, suggest

USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, FileNotFoundError, OmegaConfBaseException)
try:  # a packaged model that is not pulled, a failed pull
    from ..models.errors import PackagedModelError

    USER_ERRORS += (PackagedModelError,)
except ImportError:
    pass

# ${cos.or:${save_path},<default>}: the output folder is save_path when it is set (configs/default.yaml)
if not OmegaConf.has_resolver("cos.or"):
    OmegaConf.register_new_resolver("cos.or", lambda value, default: default if value is None else value)


def load_env(script_dir: Path) -> None:
    """MODEL_PATH etc. from .env: the nearest one above the working directory, else beside the script.
    Variables already set in the environment win."""
    found = find_dotenv(usecwd=True)
    load_dotenv(found if found else script_dir / ".env", override=False)


def _known(path: list[str]) -> bool:
    node = SCHEMA
    for part in path:
        if node == ANY:
            return True
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def precheck(argv: Sequence[str], config_dir: Path) -> str | None:
    """One-line message for an unknown method file or config key on the command line, else None.

    Hydra would catch both, with several lines of text; anything unusual (flags other than -m,
    +key / ~key / hydra.* overrides, syntax Hydra rejects) is left to Hydra.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    args = [a for a in argv if a not in ("-m", "--multirun")]
    if any(a.startswith("-") for a in args):
        return None
    try:
        overrides = OverridesParser.create().parse_overrides(overrides=list(args))
    except Exception:  # noqa: BLE001 (Hydra reports syntax errors itself)
        return None
    methods = sorted(p.stem for p in (config_dir / "method").glob("*.yaml"))
    for o in overrides:
        key = o.key_or_group
        if o.is_add() or o.is_delete() or o.is_force_add() or key == "hydra" or key.startswith(("hydra.", "hydra/")):
            continue
        if key == "method":
            choices = list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.value()]
            for choice in choices:
                if str(choice) not in methods:
                    return f"unknown method {choice!r}: use method=<one of {', '.join(methods)}> (configs/method/)"
        elif not _known(key.split(".")):
            return f"unknown config key {key}{suggest(key)}; the keys are documented in configs/default.yaml"
        elif key == "save_path" and not o.is_sweep_override() and o.value() is not None:
            blocked = _file_in_the_way(Path(str(o.value())).expanduser())
            if blocked:
                return f"save_path={o.value()}: {blocked} is a file, not a folder; give a new folder, or one " \
                       f"holding a run to resume"
    return None


def _file_in_the_way(folder: Path) -> Path | None:
    """The first existing non-folder on the way to `folder` (Hydra would crash creating it), else None."""
    for part in [*reversed(folder.parents), folder]:
        if part.exists() and not part.is_dir():
            return part
    return None


def exit_on_bad_argv(argv: Sequence[str], config_dir: Path) -> None:
    message = precheck(argv, config_dir)
    if message:
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def guarded(work: Callable[[], object], out_dir: Path) -> int:
    """Run `work`; user errors -> one line and exit code 2, Ctrl-C -> how to resume and 130."""
    kept = lambda: (out_dir / RESULTS).is_file() and (out_dir / RESULTS).stat().st_size > 0
    resume = f"finished prompts are kept in {out_dir / RESULTS}; resume with save_path={out_dir}"
    try:
        work()
        return 0
    except KeyboardInterrupt:
        print(f"interrupted: {resume}", file=sys.stderr)
        return 130
    except USER_ERRORS as e:
        if os.environ.get("COS_TRACEBACK"):
            raise
        message = " ".join(str(e).split())  # one line, whatever the exception's layout
        print(f"error: {message}" + (f" ({resume})" if kept() else ""), file=sys.stderr)
        return 2


def plain(cfg) -> dict:
    """A Hydra DictConfig -> a plain dict, interpolations resolved."""
    return OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else dict(cfg)


def hydra_output_dir() -> Path:
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)


def dataset_main(cfg, out_dir: Path | None = None, **kwargs) -> int:
    """main_dataset.py: run or resume into out_dir (default: Hydra's output folder); the exit code."""
    from .run import run_dataset

    out = Path(out_dir) if out_dir is not None else hydra_output_dir()
    return guarded(lambda: run_dataset(plain(cfg), out, **kwargs), out)


def case_main(cfg, out_dir: Path | None = None, **kwargs) -> int:
    """main_case.py: one prompt, printed with its statistics; the exit code."""
    from .case import run_case

    out = Path(out_dir) if out_dir is not None else hydra_output_dir()
    return guarded(lambda: run_case(plain(cfg), out, **kwargs), out)

