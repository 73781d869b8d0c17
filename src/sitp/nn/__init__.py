"""``sitp.nn``: modules, parameters, functional ops and initialisation (chapter 4.2).

Part of the PyTorch mirror (layer 5 of docs/layout.md), at ``torch.nn``'s dotted paths;
the layers of chapter 3's models are built here, their kernels in ``sitp.backends``.
"""

from sitp.nn import functional, init, parallel, utils
from sitp.nn.modules import (
    GELU,
    GRU,
    LSTM,
    RNN,
    BatchNorm1d,
    BCELoss,
    BCEWithLogitsLoss,
    Conv1d,
    CrossEntropyLoss,
    Dropout,
    Embedding,
    Flatten,
    GRUCell,
    HuberLoss,
    Identity,
    KLDivLoss,
    L1Loss,
    LayerNorm,
    Linear,
    LogSoftmax,
    LSTMCell,
    Module,
    ModuleDict,
    ModuleList,
    MSELoss,
    MultiheadAttention,
    NLLLoss,
    ReLU,
    RMSNorm,
    RNNBase,
    RNNCell,
    Sequential,
    Sigmoid,
    SiLU,
    SmoothL1Loss,
    Softmax,
    Tanh,
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
    Unflatten,
)
from sitp.nn.parameter import Parameter
