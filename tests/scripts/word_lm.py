"""A word-level language model, in the style of PyTorch's classic word_language_model
example: a corpus read word by word into a dictionary, batches cut by backpropagation
through time, a recurrent model (nn.LSTM, nn.GRU or nn.RNN) or a Transformer encoder,
NLLLoss over log-softmax outputs, gradient clipping and plain SGD written by hand, the
learning rate divided by 4 when the validation loss stops falling, and the best model
saved whole with ``torch.save(model)`` and read back with ``torch.load`` under
``torch.serialization.safe_globals``.

Written for PyTorch; the tests run it unchanged with `import sitp as torch`
(tests/test_torch_scripts_more.py). The data directory holds train.txt, valid.txt and
test.txt:

    python tests/scripts/word_lm.py --data data/words --model LSTM --epochs 6

``--numpy-init`` draws the weights with numpy (the same under any library) and
``--max-batches`` stops each epoch early; the last line printed is a JSON record.
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.onnx


# ------------------------------------------------------------------- the data
class Dictionary:
    """Words to indices and back, in order of first appearance."""

    def __init__(self):
        self.word2idx = {}
        self.idx2word = []

    def add_word(self, word):
        if word not in self.word2idx:
            self.idx2word.append(word)
            self.word2idx[word] = len(self.idx2word) - 1
        return self.word2idx[word]

    def __len__(self):
        return len(self.idx2word)


class Corpus:
    """The three splits of a directory as one long tensor of word indices each; every
    line ends with an ``<eos>`` token."""

    def __init__(self, path):
        self.dictionary = Dictionary()
        self.train = self.tokenize(os.path.join(path, "train.txt"))
        self.valid = self.tokenize(os.path.join(path, "valid.txt"))
        self.test = self.tokenize(os.path.join(path, "test.txt"))

    def tokenize(self, path):
        assert os.path.exists(path), path
        with open(path, encoding="utf8") as f:
            for line in f:
                for word in line.split() + ["<eos>"]:
                    self.dictionary.add_word(word)
        with open(path, encoding="utf8") as f:
            lines = []
            for line in f:
                ids = [self.dictionary.word2idx[w] for w in line.split() + ["<eos>"]]
                lines.append(torch.tensor(ids).type(torch.int64))
        return torch.cat(lines)


# ----------------------------------------------------------------- the models
class RNNModel(nn.Module):
    """An embedding, a recurrent stack and a linear decoder to the vocabulary."""

    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        if rnn_type in ["LSTM", "GRU"]:
            self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        else:
            nonlinearity = {"RNN_TANH": "tanh", "RNN_RELU": "relu"}.get(rnn_type)
            if nonlinearity is None:
                raise ValueError(
                    "--model must be one of LSTM, GRU, RNN_TANH, RNN_RELU or Transformer"
                )
            self.rnn = nn.RNN(ninp, nhid, nlayers, nonlinearity=nonlinearity, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:  # "Using the Output Embedding to Improve Language Models" (2016)
            if nhid != ninp:
                raise ValueError("When using the tied flag, nhid must be equal to emsize")
            self.decoder.weight = self.encoder.weight
        self.init_weights()
        self.rnn_type = rnn_type
        self.nhid = nhid
        self.nlayers = nlayers

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))  # (T, B, ninp)
        output, hidden = self.rnn(emb, hidden)  # (T, B, nhid)
        output = self.drop(output)
        decoded = self.decoder(output).view(-1, self.ntoken)  # (T * B, ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        if self.rnn_type == "LSTM":
            return (
                weight.new_zeros((self.nlayers, bsz, self.nhid)),
                weight.new_zeros((self.nlayers, bsz, self.nhid)),
            )
        return weight.new_zeros((self.nlayers, bsz, self.nhid))


class PositionalEncoding(nn.Module):
    """Adds the sinusoids of "Attention Is All You Need" to the embeddings:
    PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d))."""

    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        pe = pe.unsqueeze(0).transpose(0, 1)  # (max_len, 1, d_model)
        self.register_buffer("pe", pe)

    def forward(self, x):
        x = x + self.pe[: x.size(0), :]  # x: (T, B, d_model)
        return self.dropout(x)


class TransformerModel(nn.Transformer):
    """nn.Transformer's encoder with a causal mask, between an embedding and a decoder
    to the vocabulary (nn.Transformer's own decoder stack is built and not used)."""

    def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.5):
        super().__init__(
            d_model=ninp,
            nhead=nhead,
            dim_feedforward=nhid,
            num_encoder_layers=nlayers,
            num_decoder_layers=1,
            dropout=dropout,
        )
        self.model_type = "Transformer"
        self.src_mask = None
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        self.input_emb = nn.Embedding(ntoken, ninp)
        self.ninp = ninp
        self.decoder = nn.Linear(ninp, ntoken)
        self.init_weights()

    def _generate_square_subsequent_mask(self, sz):
        return torch.log(torch.tril(torch.ones(sz, sz)))  # 0 on and below the diagonal, -inf above

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.input_emb.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, src, has_mask=True):
        if has_mask:
            device = src.device
            if self.src_mask is None or self.src_mask.size(0) != len(src):
                self.src_mask = self._generate_square_subsequent_mask(len(src)).to(device)
        else:
            self.src_mask = None
        src = self.input_emb(src) * math.sqrt(self.ninp)
        src = self.pos_encoder(src)
        output = self.encoder(src, mask=self.src_mask)
        output = self.decoder(output)
        return F.log_softmax(output, dim=-1)


def safe_globals_for(model_name):
    """What a weights-only torch.load needs allowed to rebuild the saved model."""
    common = [nn.Dropout, nn.Embedding, nn.Linear]
    if model_name == "Transformer":
        return common + [
            PositionalEncoding,
            TransformerModel,
            F.relu,
            nn.LayerNorm,
            nn.ModuleList,
            nn.MultiheadAttention,
            nn.TransformerEncoder,
            nn.TransformerEncoderLayer,
            nn.TransformerDecoder,
            nn.TransformerDecoderLayer,
            nn.modules.linear.NonDynamicallyQuantizableLinear,
        ]
    rnn = {"LSTM": nn.LSTM, "GRU": nn.GRU}.get(model_name, nn.RNN)
    return common + [RNNModel, rnn]


# ------------------------------------------------------------------- training
def numpy_init(model, seed):
    """Every weight redrawn by numpy, uniform in +-0.1, biases zero: the same start
    under any library (drawn in the order of the parameters' names)."""
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.dim() < 2:
                p.zero_()
            else:
                p.copy_(torch.from_numpy(rng.uniform(-0.1, 0.1, tuple(p.shape)).astype(np.float32)))


def batchify(data, bsz, device):
    """The stream as ``bsz`` columns (its tail that does not fill a row dropped): row t
    holds the t-th word of each column, shape (N // bsz, bsz)."""
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous().to(device)


def repackage_hidden(h):
    """Cut the hidden state from the graph of the batch before: truncated BPTT."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def get_batch(source, i, bptt):
    """Rows i .. i+bptt as inputs; the rows one below as targets, flattened."""
    seq_len = min(bptt, len(source) - 1 - i)
    data = source[i : i + seq_len]
    target = source[i + 1 : i + 1 + seq_len].view(-1)
    return data, target


def main(argv):
    parser = argparse.ArgumentParser(description="A word-level language model")
    parser.add_argument("--data", type=str, default="./data/words")
    parser.add_argument("--model", type=str, default="LSTM")
    parser.add_argument("--emsize", type=int, default=200)
    parser.add_argument("--nhid", type=int, default=200)
    parser.add_argument("--nlayers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=20)
    parser.add_argument("--clip", type=float, default=0.25)
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--batch_size", type=int, default=20)
    parser.add_argument("--bptt", type=int, default=35)
    parser.add_argument("--dropout", type=float, default=0.2)
    parser.add_argument("--tied", action="store_true")
    parser.add_argument("--seed", type=int, default=1111)
    parser.add_argument("--log-interval", type=int, default=200)
    parser.add_argument("--save", type=str, default="model.pt")
    parser.add_argument("--onnx-export", type=str, default="")
    parser.add_argument("--nhead", type=int, default=2)
    parser.add_argument("--accel", action="store_true", help="use the accelerator if any")
    parser.add_argument("--numpy-init", action="store_true")
    parser.add_argument("--max-batches", type=int, default=0, help="per epoch; 0: all")
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    if args.accel and torch.accelerator.is_available():
        device = torch.accelerator.current_accelerator()
    else:
        device = torch.device("cpu")
    print(f"Using {device}")

    corpus = Corpus(args.data)
    eval_batch_size = 10
    train_data = batchify(corpus.train, args.batch_size, device)
    val_data = batchify(corpus.valid, eval_batch_size, device)
    test_data = batchify(corpus.test, eval_batch_size, device)

    ntokens = len(corpus.dictionary)
    if args.model == "Transformer":
        model = TransformerModel(
            ntokens, args.emsize, args.nhead, args.nhid, args.nlayers, args.dropout
        )
    else:
        model = RNNModel(
            args.model, ntokens, args.emsize, args.nhid, args.nlayers, args.dropout, args.tied
        )
    if args.numpy_init:
        numpy_init(model, args.seed)
    model = model.to(device)
    criterion = nn.NLLLoss()
    record = {"train": [], "val": []}

    def evaluate(data_source):
        model.eval()  # no dropout
        total_loss = 0.0
        if args.model != "Transformer":
            hidden = model.init_hidden(eval_batch_size)
        with torch.no_grad():
            for i in range(0, data_source.size(0) - 1, args.bptt):
                data, targets = get_batch(data_source, i, args.bptt)
                if args.model == "Transformer":
                    output = model(data)
                    output = output.view(-1, ntokens)
                else:
                    output, hidden = model(data, hidden)
                    hidden = repackage_hidden(hidden)
                total_loss += len(data) * criterion(output, targets).item()
        return total_loss / (len(data_source) - 1)

    def train(epoch, lr):
        model.train()
        total_loss = 0.0
        start_time = time.time()
        if args.model != "Transformer":
            hidden = model.init_hidden(args.batch_size)
        for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
            data, targets = get_batch(train_data, i, args.bptt)
            model.zero_grad()
            if args.model == "Transformer":
                output = model(data)
                output = output.view(-1, ntokens)
            else:
                hidden = repackage_hidden(hidden)
                output, hidden = model(data, hidden)
            loss = criterion(output, targets)
            loss.backward()
            # clipping keeps the exploding gradients of RNNs / LSTMs in check
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)
            record["train"].append(loss.item())
            total_loss += loss.item()
            if batch % args.log_interval == 0 and batch > 0:
                cur_loss = total_loss / args.log_interval
                elapsed = time.time() - start_time
                print(
                    f"| epoch {epoch:3d} | {batch:5d}/{len(train_data) // args.bptt:5d} batches "
                    f"| lr {lr:02.2f} | ms/batch {elapsed * 1000 / args.log_interval:5.2f} "
                    f"| loss {cur_loss:5.2f} | ppl {math.exp(cur_loss):8.2f}"
                )
                total_loss = 0.0
                start_time = time.time()
            if args.max_batches and batch + 1 >= args.max_batches:
                break

    def export_onnx(path, batch_size, seq_len):
        print(f"The model is also exported in ONNX format at {os.path.realpath(path)}.")
        model.eval()
        dummy_input = torch.LongTensor(seq_len * batch_size).zero_().view(-1, batch_size)
        dummy_input = dummy_input.to(device)
        hidden = model.init_hidden(batch_size)
        torch.onnx.export(model, (dummy_input, hidden), path)

    lr = args.lr
    best_val_loss = None
    for epoch in range(1, args.epochs + 1):
        epoch_start_time = time.time()
        train(epoch, lr)
        val_loss = evaluate(val_data)
        record["val"].append(val_loss)
        print("-" * 89)
        print(
            f"| end of epoch {epoch:3d} | time: {time.time() - epoch_start_time:5.2f}s "
            f"| valid loss {val_loss:5.2f} | valid ppl {math.exp(val_loss):8.2f}"
        )
        print("-" * 89)
        if not best_val_loss or val_loss < best_val_loss:
            with open(args.save, "wb") as f:
                torch.save(model, f)  # the whole module, not only its state_dict
            best_val_loss = val_loss
        else:
            lr /= 4.0  # no improvement on the validation set: anneal
    record["lr"] = lr

    # the best model, read back as a weights-only load allows: its classes named
    with open(args.save, "rb") as f:
        with torch.serialization.safe_globals(safe_globals_for(args.model)):
            model = torch.load(f)
        if args.model in ["RNN_TANH", "RNN_RELU", "LSTM", "GRU"]:
            model.rnn.flatten_parameters()  # contiguous weights again after the load
    record["best_val_loss"] = best_val_loss
    record["val_reloaded"] = evaluate(val_data)
    test_loss = evaluate(test_data)
    record["test"] = test_loss
    print("=" * 89)
    print(f"| End of training | test loss {test_loss:5.2f} | test ppl {math.exp(test_loss):8.2f}")
    print("=" * 89)
    if args.onnx_export:
        export_onnx(args.onnx_export, batch_size=1, seq_len=args.bptt)
    print(json.dumps(record))


if __name__ == "__main__":
    main(sys.argv[1:])
