"""Moved: conv_tuned.cu's launch parameters are labkit.ops.tuned_config; the sweep that picks them is
labkit.ladder.tuning; the tables are labkit.tuned.  Old names resolve from their new homes:

    TunedConfig, tuned_config, default_config, check_config, candidates, layer_key, shared_bytes,
    TABLE, WEIGHT_PLACES                               -> labkit.ops.tuned_config
    sweep_tuned, record_winner                         -> labkit.ladder.tuning
    read_table, write_entry                            -> labkit.tuned
    STATIC_SHARED_LIMIT, CONSTANT_LIMIT                -> labkit.backends.limits
"""
from .moved import forwarding

__getattr__, __dir__ = forwarding(__name__, "labkit.ops.tuned_config", {
    "sweep_tuned": "labkit.ladder.tuning", "record_winner": "labkit.ladder.tuning",
    "read_table": "labkit.tuned", "write_entry": "labkit.tuned",
    "STATIC_SHARED_LIMIT": "labkit.backends.limits:SHARED_MEM_PER_BLOCK",
    "CONSTANT_LIMIT": "labkit.backends.limits:CONSTANT_MEMORY",
})
