"""The layers of ``sitp.nn``, one concept per file (chapters 3.1 to 3.5 build them, 4.2 fuses them)."""

from sitp.nn.modules.activation import (
    GELU,
    LogSoftmax,
    MultiheadAttention,
    ReLU,
    Sigmoid,
    SiLU,
    Softmax,
    Tanh,
)
from sitp.nn.modules.container import ModuleDict, ModuleList, Sequential
from sitp.nn.modules.conv import Conv1d, Conv2d
from sitp.nn.modules.dropout import Dropout, Dropout2d
from sitp.nn.modules.linear import Flatten, Identity, Linear, Unflatten
from sitp.nn.modules.loss import (
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
)
from sitp.nn.modules.module import Module
from sitp.nn.modules.normalization import BatchNorm1d, BatchNorm2d, LayerNorm, RMSNorm
from sitp.nn.modules.pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d
from sitp.nn.modules.rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell
from sitp.nn.modules.sparse import Embedding
from sitp.nn.modules.transformer import (
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)
from sitp.nn.modules.upsampling import Upsample, UpsamplingBilinear2d, UpsamplingNearest2d
