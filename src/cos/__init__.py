"""CoS: exact, fast collaborative decoding of several LMs (Fu et al., ICML 2025)."""

from .combination import Combination, Contrastive, Custom, Mean, ProxyTuning, Realignment, WeightedEnsemble
from .engine import Engine, Generation
from .loading import load_member
from .member import Member
from .plan import LOOPS as METHODS
from .plan import make_plan
from .presets import make_combination
from .sampling import SamplingParams
from .stats import GenerationStats

__all__ = [
    "Combination", "Contrastive", "Custom", "Engine", "Generation", "GenerationStats", "Mean", "Member",
    "METHODS", "ProxyTuning", "Realignment", "SamplingParams", "WeightedEnsemble", "load_member",
    "make_combination", "make_plan",
]
