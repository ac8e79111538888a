"""The draft-depth (K) policy: per (language, context class), from a tuned profile and online acceptance.

``KPolicy.k_for(language, context_class)`` answers the K for a request (0 = speculation off) and
``KPolicy.observe_round(...)`` takes each verification round's outcome (a ``RoundRecord``); K is chosen by
replaying recorded rounds under each cap (``best_k_replay``; the pure cost and replay maths are in
:mod:`codecue.tuning.k_choice`, apart from the stateful policy). Profiles are TOML
(:mod:`codecue.tuning.profile`); ``codecue tune`` (:mod:`codecue.commands.tune`) measures and writes them.
"""

from codecue.tuning.k_choice import (
    DEFAULT_K_MAX,
    CostModel,
    best_k,
    best_k_replay,
    expected_speedup,
    expected_tokens,
    replay_speedup,
)
from codecue.tuning.policy import KPolicy, PolicySettings
from codecue.tuning.profile import (
    ClassProfile,
    Profile,
    default_profile,
    dumps_profile,
    load_profile,
    save_profile,
    user_profile_path,
)

__all__ = [
    "DEFAULT_K_MAX",
    "ClassProfile",
    "CostModel",
    "KPolicy",
    "PolicySettings",
    "Profile",
    "best_k",
    "best_k_replay",
    "default_profile",
    "dumps_profile",
    "expected_speedup",
    "expected_tokens",
    "load_profile",
    "replay_speedup",
    "save_profile",
    "user_profile_path",
]
