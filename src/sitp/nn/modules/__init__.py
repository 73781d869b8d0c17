"""The layers of ``sitp.nn``, one concept per file."""

from .activation import GELU, LogSoftmax, ReLU, SiLU, Sigmoid, Softmax, Tanh
from .container import ModuleDict, ModuleList, Sequential
from .conv import Conv1d
from .dropout import Dropout
from .linear import Flatten, Identity, Linear, Unflatten
from .module import Module
from .normalization import BatchNorm1d, LayerNorm
from .rnn import GRUCell, RNNCell
from .sparse import Embedding
