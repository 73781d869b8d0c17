"""Conversations as tokens (chapter 8.1): a chat format, its training mask, and parsing back.

A conversation is a list of messages, each a dict ``{"role": ..., "content": ...}``,
the roles alternating ``"user"``, ``"assistant"``, ``"user"``, ... from a user turn.
It becomes one sequence of token ids, framed by five special tokens::

    <|bos|> <|user_start|> How are you? <|user_end|>
            <|assistant_start|> Well, thank you. <|assistant_end|>
            <|user_start|> ...

* ``<|bos|>`` begins every conversation (the model's first input: nothing to predict);
* ``<|user_start|>`` / ``<|user_end|>`` frame what the user typed;
* ``<|assistant_start|>`` / ``<|assistant_end|>`` frame the assistant's reply.
  At inference the prompt ends with ``<|assistant_start|>``, and the model's own
  ``<|assistant_end|>`` says that its turn is over.

:func:`render` returns the ids and a mask of the same length: 1 on the tokens the
assistant writes (each reply's content and its ``<|assistant_end|>``), 0 elsewhere.
Supervised fine-tuning trains on the positions whose *target* has mask 1, so the
model learns to answer, not to imitate the user nor to predict the frame.

:class:`ChatTokenizer` adds the special tokens to any base tokenizer. A
:class:`~sitp.tokenizers.BPETokenizer` trained with ``special_tokens=SPECIAL_TOKENS``
already holds them and keeps its ids; any other tokenizer (a
:class:`~sitp.data.tokens.CharTokenizer`, a :class:`~sitp.data.tokens.ByteTokenizer`)
gets them as the ids just above its vocabulary. The content of a message is always
encoded as ordinary text: a user who types ``<|assistant_end|>`` writes those 19
characters, never the special token.

Tool calls (chapter 8.2) are an opt-in extension: ``ChatTokenizer(base, tools=True)``
adds four more special tokens, :data:`TOOL_TOKENS`, after the five (ids 261 to 264 over
bytes), and an assistant's content may then be a list of parts instead of a string::

    [{"type": "calc", "text": "47*85"},     # <|calc|> 47*85 <|/calc|>       mask 1
     {"type": "result", "text": "3995"},    # <|result|> 3995 <|/result|>    mask 0
     {"type": "text", "text": "3995"}]      # 3995 <|assistant_end|>         mask 1

The model writes the call; the engine (:mod:`sitp.posttrain.tools`) writes the result,
so the result's tokens are masked. A tokenizer made without ``tools`` has the five
tokens only, and everything it renders is as before.

Example:
    >>> from sitp.data.tokens import ByteTokenizer
    >>> tok = ChatTokenizer(ByteTokenizer())
    >>> conversation = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]
    >>> ids, mask = render(conversation, tok)
    >>> tok.vocab_size, len(ids), mask
    (261, 10, [0, 0, 0, 0, 0, 0, 0, 0, 1, 1])
    >>> parse(ids, tok) == conversation
    True
"""

from __future__ import annotations

BOS = "<|bos|>"
USER_START = "<|user_start|>"
USER_END = "<|user_end|>"
ASSISTANT_START = "<|assistant_start|>"
ASSISTANT_END = "<|assistant_end|>"
#: The chat format's special tokens, in the order of their ids when they are appended.
SPECIAL_TOKENS = (BOS, USER_START, USER_END, ASSISTANT_START, ASSISTANT_END)
ROLES = ("user", "assistant")
CALC_START = "<|calc|>"
CALC_END = "<|/calc|>"
RESULT_START = "<|result|>"
RESULT_END = "<|/result|>"
#: The tool tokens of ``ChatTokenizer(base, tools=True)``, appended after the five.
TOOL_TOKENS = (CALC_START, CALC_END, RESULT_START, RESULT_END)
#: The parts of an assistant's content with tools: the frame of each, and whether the
#: model writes it (mask 1) or the tool does (mask 0).
PARTS = {"text": (None, None, 1), "calc": (CALC_START, CALC_END, 1),
         "result": (RESULT_START, RESULT_END, 0)}  # fmt: skip


class ChatTokenizer:
    """A base tokenizer and the chat format's special tokens.

    Args:
        base: a tokenizer with ``encode``, ``decode`` and ``vocab_size``. If it has
            ``special_tokens`` naming all of :data:`SPECIAL_TOKENS` (a BPE trained with
            them), their ids are its own; otherwise they are ``base.vocab_size``,
            ``base.vocab_size + 1``, ...
        tools: also the four :data:`TOOL_TOKENS` (the base's own ids if it has them,
            else the ids just above the others); ``calc_start`` ... ``result_end`` are
            None without them.
    """

    def __init__(self, base, tools: bool = False):
        self.base = base
        self.tools = bool(tools)
        own = getattr(base, "special_tokens", None) or {}
        self.special, self.vocab_size = {}, int(base.vocab_size)
        for group in (SPECIAL_TOKENS, TOOL_TOKENS) if self.tools else (SPECIAL_TOKENS,):
            if all(name in own for name in group):
                self.special.update({name: int(own[name]) for name in group})
            else:
                first = self.vocab_size
                self.special.update({name: first + i for i, name in enumerate(group)})
                self.vocab_size = first + len(group)
        self.name_of = {i: name for name, i in self.special.items()}
        self.bos, self.user_start, self.user_end = (self.special[n] for n in SPECIAL_TOKENS[:3])
        self.assistant_start = self.special[ASSISTANT_START]
        self.assistant_end = self.special[ASSISTANT_END]
        self.calc_start, self.calc_end, self.result_start, self.result_end = (
            self.special.get(n) for n in TOOL_TOKENS
        )

    def encode_text(self, text: str) -> list[int]:
        """Ordinary text as ids: never a special token, whatever the text says."""
        ordinary = getattr(self.base, "encode_ordinary", None)
        ids = ordinary(text) if ordinary is not None else self.base.encode(text)
        return [int(i) for i in ids]

    def decode_text(self, ids) -> str:
        """Ordinary ids back to text (special ids must not be among them)."""
        return self.base.decode(list(ids))

    def decode(self, ids) -> str:
        """Any ids as text, each special token written as its name."""
        out, run = [], []
        for i in ids:
            i = int(i)
            if i in self.name_of:
                if run:
                    out.append(self.decode_text(run))
                    run = []
                out.append(self.name_of[i])
            else:
                run.append(i)
        if run:
            out.append(self.decode_text(run))
        return "".join(out)


def _check(conversation, for_training: bool) -> None:
    if not isinstance(conversation, (list, tuple)) or not conversation:
        raise ValueError(f"a conversation is a non-empty list of messages, got {conversation!r}")
    for n, message in enumerate(conversation):
        if not isinstance(message, dict) or set(message) != {"role", "content"}:
            raise ValueError(
                f"message {n} must be a dict with exactly 'role' and 'content', got {message!r}"
            )
        role = message["role"]
        if role not in ROLES:
            raise ValueError(f"message {n} has unknown role {role!r}; the roles are {ROLES}")
        content = message["content"]
        if isinstance(content, list) and role == "assistant":
            for part in content:
                if (not isinstance(part, dict) or set(part) != {"type", "text"}
                        or part["type"] not in PARTS or not isinstance(part["text"], str)):  # fmt: skip
                    raise ValueError(
                        f"message {n}: a part is a dict {{'type', 'text'}} with a str text and "
                        f"a type in {tuple(PARTS)}, got {part!r}"
                    )
        elif not isinstance(content, str):
            raise ValueError(f"message {n}'s content must be a str, got {content!r}")
        expected = ROLES[n % 2]
        if role != expected:
            raise ValueError(
                f"message {n} is from the {role}, but the turns alternate from the user: "
                f"message {n} must be the {expected}'s"
            )
    last = conversation[-1]["role"]
    if for_training and last != "assistant":
        raise ValueError(
            "a conversation for training must end with the assistant's reply "
            f"(it ends with the {last}'s message): there is nothing to learn after it"
        )
    if not for_training and last != "user":
        raise ValueError(
            f"a prompt must end with the user's message (it ends with the {last}'s): "
            "the model writes the assistant's next reply"
        )


def _encode_reply(content, tokenizer: ChatTokenizer) -> tuple[list[int], list[int]]:
    """An assistant's content (a str, or a list of parts) as ids and their mask."""
    if isinstance(content, str):
        ids = tokenizer.encode_text(content)
        return ids, [1] * len(ids)
    if not tokenizer.tools:
        raise ValueError("a reply of parts needs a tokenizer with the tool tokens (tools=True)")
    ids, mask = [], []
    for part in content:
        start, end, m = PARTS[part["type"]]
        frame = [tokenizer.special[start]] if start else []
        piece = (
            frame + tokenizer.encode_text(part["text"]) + ([tokenizer.special[end]] if end else [])
        )
        ids += piece
        mask += [m] * len(piece)
    return ids, mask


# --8<-- [start:render]
def render(conversation, tokenizer: ChatTokenizer) -> tuple[list[int], list[int]]:
    """The ids of a whole conversation and its training mask (1: the assistant wrote it).

    An assistant's content given as parts (with ``tools=True``) has mask 1 on its text
    and its calls, frame included, and 0 on each result, frame included: the tool writes
    those tokens, so the model is not trained to.

    Raises:
        ValueError: a message is malformed or has an unknown role, the turns do not
            alternate from the user, or the last message is not the assistant's.
    """
    _check(conversation, for_training=True)
    ids, mask = [tokenizer.bos], [0]
    for message in conversation:
        if message["role"] == "user":
            part = [tokenizer.user_start, *tokenizer.encode_text(message["content"]),
                    tokenizer.user_end]  # fmt: skip
            ids += part
            mask += [0] * len(part)
        else:
            content, m = _encode_reply(message["content"], tokenizer)
            ids += [tokenizer.assistant_start, *content, tokenizer.assistant_end]
            mask += [0, *m, 1]
    return ids, mask


# --8<-- [end:render]


def render_prompt(conversation, tokenizer: ChatTokenizer) -> list[int]:
    """The ids that ask for the assistant's next reply: the conversation, which must
    end with the user's message, and ``<|assistant_start|>``."""
    _check(conversation, for_training=False)
    ids = [tokenizer.bos]
    for message in conversation:
        if message["role"] == "user":
            content = tokenizer.encode_text(message["content"])
            ids += [tokenizer.user_start, *content, tokenizer.user_end]
        else:
            content = _encode_reply(message["content"], tokenizer)[0]
            ids += [tokenizer.assistant_start, *content, tokenizer.assistant_end]
    return ids + [tokenizer.assistant_start]


def completion_text(ids, tokenizer: ChatTokenizer) -> str:
    """The reply in generated ids: the text before the first special token (the model's
    ``<|assistant_end|>``, or any frame token it should not have written).

    With ``tools=True``, the calls and results (each from its opening token to its
    closing one, or to the end of the ids) are left out and the text goes on after them:
    ``<|calc|>6*7<|/calc|><|result|>42<|/result|>42`` reads ``"42"``, the reply's own text.
    """
    out, pos = [], 0
    ids = [int(i) for i in ids]
    spans = {tokenizer.calc_start: tokenizer.calc_end, tokenizer.result_start: tokenizer.result_end}
    while pos < len(ids):
        i = ids[pos]
        if tokenizer.tools and i in spans:
            end = spans[i]
            pos += 1
            while pos < len(ids) and ids[pos] != end:
                pos += 1
        elif i in tokenizer.name_of:
            break
        else:
            out.append(i)
        pos += 1
    return tokenizer.decode_text(out)


def _decode_reply(ids, tokenizer: ChatTokenizer):
    """An assistant's ids (no frame) back to its content: a str, or parts with tools."""
    if not any(i in tokenizer.name_of for i in ids):
        return tokenizer.decode_text(ids)
    opens = {tokenizer.special[start]: (kind, tokenizer.special[end])
             for kind, (start, end, _) in PARTS.items() if start}  # fmt: skip
    parts, pos = [], 0
    while pos < len(ids):
        if ids[pos] in opens:
            kind, end = opens[ids[pos]]
            stop = pos + 1
            while stop < len(ids) and ids[stop] not in tokenizer.name_of:
                stop += 1
            if stop == len(ids) or ids[stop] != end:
                raise ValueError(f"a {kind} part opened in the reply is not closed")
            parts.append({"type": kind, "text": tokenizer.decode_text(ids[pos + 1 : stop])})
            pos = stop + 1
        elif ids[pos] in tokenizer.name_of:
            raise ValueError(f"{tokenizer.name_of[ids[pos]]} cannot stand in a reply")
        else:
            stop = pos
            while stop < len(ids) and ids[stop] not in tokenizer.name_of:
                stop += 1
            parts.append({"type": "text", "text": tokenizer.decode_text(ids[pos:stop])})
            pos = stop
    return parts


def parse(ids, tokenizer: ChatTokenizer) -> list[dict]:
    """The conversation that :func:`render` (or :func:`render_prompt`) made into ``ids``.

    A trailing ``<|assistant_start|>`` with no reply yet (a prompt) is dropped.

    Raises:
        ValueError: the ids do not follow the chat format, or their turns do not
            alternate from the user's as :func:`render` requires (the message names
            the position and what was expected there).
    """
    ids = [int(i) for i in ids]
    if not ids or ids[0] != tokenizer.bos:
        raise ValueError("the ids do not begin with <|bos|>")
    frames = {tokenizer.user_start: ("user", tokenizer.user_end),
              tokenizer.assistant_start: ("assistant", tokenizer.assistant_end)}  # fmt: skip
    conversation, pos = [], 1
    while pos < len(ids):
        start = ids[pos]
        if start not in frames:
            what = tokenizer.name_of.get(start, f"ordinary token {start}")
            raise ValueError(f"position {pos}: expected a turn's start token, got {what}")
        role, end = frames[start]
        expected = ROLES[len(conversation) % 2]
        if role != expected:
            raise ValueError(
                f"position {pos}: turn {len(conversation)} opens as the {role}'s, but the "
                f"turns alternate from the user: it must be the {expected}'s"
            )
        if role == "assistant" and pos == len(ids) - 1:
            break  # a prompt's open turn
        tools = {tokenizer.special[n] for n in TOOL_TOKENS if n in tokenizer.special}
        inside = tools if role == "assistant" else set()  # a reply may hold calls and results
        stop = pos + 1
        while stop < len(ids) and (ids[stop] not in tokenizer.name_of or ids[stop] in inside):
            stop += 1
        if stop == len(ids) or ids[stop] != end:
            got = "the end of the ids" if stop == len(ids) else tokenizer.name_of[ids[stop]]
            raise ValueError(
                f"position {stop}: the {role}'s turn from {pos} must end with "
                f"{tokenizer.name_of[end]}, got {got}"
            )
        body = ids[pos + 1 : stop]
        content = _decode_reply(body, tokenizer) if inside else tokenizer.decode_text(body)
        conversation.append({"role": role, "content": content})
        pos = stop + 1
    return conversation


__all__ = [
    "ASSISTANT_END",
    "ASSISTANT_START",
    "BOS",
    "CALC_END",
    "CALC_START",
    "PARTS",
    "RESULT_END",
    "RESULT_START",
    "ROLES",
    "SPECIAL_TOKENS",
    "TOOL_TOKENS",
    "USER_END",
    "USER_START",
    "ChatTokenizer",
    "completion_text",
    "parse",
    "render",
    "render_prompt",
]
