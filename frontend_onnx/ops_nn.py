"""Neural-network ONNX ops; importing this module registers them all."""

from . import (  # noqa: F401
    ops_nn_attention,
    ops_nn_contrib_attention,
    ops_nn_conv,
    ops_nn_index,
    ops_nn_linalg,
    ops_nn_nchwc,
    ops_nn_norm,
    ops_nn_quant,
    ops_nn_resize,
    ops_nn_rnn,
)
