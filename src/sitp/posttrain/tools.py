"""A calculator tool (chapter 8.2): a safe evaluator, the engine's hook, and its training data.

A tool call is a span of the assistant's reply in the token stream (with
``ChatTokenizer(base, tools=True)``)::

    <|assistant_start|> <|calc|> 47*85 <|/calc|> <|result|> 3995 <|/result|> 3995 <|assistant_end|>
                        '------ the model writes ------'   '--- the tool writes ---'  '- the model -'

The model writes ``<|calc|>``, an expression and ``<|/calc|>``. The decode loop
(:class:`~sitp.models.engine.Engine` with ``tool=Calculator(tok)``) then stops taking the
model's tokens for that row: :class:`Calculator` reads the expression, computes it with
:func:`calc`, and the engine feeds ``<|result|>``, the value's tokens and ``<|/result|>``
as the row's next tokens, through the same KV cache, before the model goes on. In
training data the result is a part of type ``"result"``, masked (the model must not learn
to write it: the tool does, and what the model should learn is to copy it).

:func:`calc` is a recursive-descent parser of integer arithmetic: integers, ``+``, ``-``,
``*``, unary minus and parentheses, nothing else. It never calls Python's ``eval``: a
model's text is not code to run. Malformed input raises :class:`CalcError`; the engine
catches it and feeds back ``<|result|>error<|/result|>`` instead.

Example:
    >>> calc("12*(3+4)-5"), calc("-2*-3")
    (79, 6)
    >>> calc("2**3")
    Traceback (most recent call last):
    ...
    sitp.posttrain.tools.CalcError: expected a number, '-' or '(': unexpected '*' at position 2 in '2**3'
"""

from __future__ import annotations

import re

from sitp.posttrain.chat import ChatTokenizer
from sitp.posttrain.tasks import Addition, ChainAddition, Multiplication, Problem, Task

#: The longest expression :func:`calc` reads, and the deepest nesting of parentheses:
#: bounds on the work a model's text can ask for.
MAX_LENGTH, MAX_DEPTH = 200, 32
#: What the tool feeds back when the call cannot be computed.
ERROR = "error"

_TOKEN = re.compile(r"\s*(?:(\d+)|(.))")


class CalcError(ValueError):
    """An expression :func:`calc` cannot compute; the message names the position."""


# --8<-- [start:calc]
def calc(expression: str) -> int:
    """The value of an integer expression: ``+ - *``, unary minus, parentheses.

    The grammar, one function each below (``*`` binds tighter than ``+`` and ``-``,
    all are left-associative)::

        expr   := term (("+" | "-") term)*
        term   := factor ("*" factor)*
        factor := "-" factor | "(" expr ")" | digits

    Raises:
        CalcError: an empty or too long expression, a character that is none of
            ``0-9 + - * ( )`` and spaces, a missing operand or parenthesis, or
            parentheses nested deeper than MAX_DEPTH.
    """
    if not isinstance(expression, str):
        raise CalcError(f"an expression is a str, got {type(expression).__name__}")
    if len(expression) > MAX_LENGTH:
        raise CalcError(f"the expression has {len(expression)} characters, over {MAX_LENGTH}")
    tokens = []  # (kind, value, position): kind "int", an operator or "end"
    for m in _TOKEN.finditer(expression):
        if m.group(1) is not None:
            tokens.append(("int", int(m.group(1)), m.start(1)))
        elif m.group(2) in "+-*()":
            tokens.append((m.group(2), None, m.start(2)))
        elif not m.group(2).isspace():
            raise CalcError(f"unexpected {m.group(2)!r} at position {m.start(2)} in {expression!r}")
    tokens.append(("end", None, len(expression)))
    pos = 0

    def fail(what):
        kind, _, at = tokens[pos]
        got = "the end" if kind == "end" else repr(kind if kind != "int" else str(tokens[pos][1]))
        raise CalcError(f"{what}: unexpected {got} at position {at} in {expression!r}")

    def expr(depth):
        nonlocal pos
        value = term(depth)
        while tokens[pos][0] in "+-":
            sign = 1 if tokens[pos][0] == "+" else -1
            pos += 1
            value += sign * term(depth)
        return value

    def term(depth):
        nonlocal pos
        value = factor(depth)
        while tokens[pos][0] == "*":
            pos += 1
            value *= factor(depth)
        return value

    def factor(depth):
        nonlocal pos
        if depth > MAX_DEPTH:
            raise CalcError(f"parentheses and signs nested deeper than {MAX_DEPTH}")
        kind, value, _ = tokens[pos]
        if kind == "int":
            pos += 1
            return value
        if kind == "-":
            pos += 1
            return -factor(depth + 1)
        if kind == "(":
            pos += 1
            value = expr(depth + 1)
            if tokens[pos][0] != ")":
                fail("a '(' is not closed")
            pos += 1
            return value
        fail("expected a number, '-' or '('")

    if tokens[0][0] == "end":
        raise CalcError("the expression is empty")
    value = expr(0)
    if tokens[pos][0] != "end":
        fail("expected an operator")
    return value


# --8<-- [end:calc]


# --8<-- [start:calculator]
class Calculator:
    """The engine's hook: after a row writes ``<|/calc|>``, the tokens to feed it next.

    ``Engine.stream(..., tool=Calculator(tok))`` calls it with the row's new tokens so
    far (the last one ``end_id``, the ``<|/calc|>``); it returns ``<|result|>``, the
    value's text and ``<|/result|>``, or :data:`ERROR` in their place when the call
    cannot be computed (a malformed expression, or no ``<|calc|>`` before the end).
    """

    def __init__(self, tokenizer: ChatTokenizer):
        if not tokenizer.tools:
            raise ValueError("the calculator needs a tokenizer with the tool tokens (tools=True)")
        self.tok = tokenizer
        self.end_id = tokenizer.calc_end
        self.calls = []  # (expression, what was fed back), in the order they ran

    def __call__(self, generated) -> list[int]:
        ids = [int(i) for i in generated][:-1]  # without the closing <|/calc|>
        start = max((n for n, i in enumerate(ids) if i == self.tok.calc_start), default=None)
        body = ids[start + 1 :] if start is not None else None
        if body is None or any(i in self.tok.name_of for i in body):
            text, answer = None, ERROR  # no call opened, or a special token inside it
        else:
            text = self.tok.decode_text(body)
            try:
                answer = str(calc(text))
            except CalcError:
                answer = ERROR
        self.calls.append((text, answer))
        return [self.tok.result_start, *self.tok.encode_text(answer), self.tok.result_end]


# --8<-- [end:calculator]


def expression(task: Task, problem: Problem) -> str:
    """The calculator's input for an arithmetic problem: ``"47*85"``, ``"3+4+5"``."""
    if isinstance(task, (Addition, Multiplication)):
        a, b = problem.args
        return f"{a}{task.symbol}{b}"
    if isinstance(task, ChainAddition):
        return "+".join(str(x) for x in problem.args)
    raise ValueError(f"{task.name} is not an arithmetic task: it has no calculator call")


def tool_conversation(task: Task, problem: Problem) -> list[dict]:
    """The problem as a chat whose reply calls the calculator, then states its result:
    ``[calc "47*85", result "3995", text "3995"]`` (``"Answer: 12"`` for a chain task,
    whose checker reads the marker)."""
    value = calc(expression(task, problem))
    answer = f"Answer: {value}" if isinstance(task, ChainAddition) else str(value)
    reply = [{"type": "calc", "text": expression(task, problem)},
             {"type": "result", "text": str(value)},
             {"type": "text", "text": answer}]  # fmt: skip
    return [{"role": "user", "content": task.prompt(problem)},
            {"role": "assistant", "content": reply}]  # fmt: skip


__all__ = ["ERROR", "CalcError", "Calculator", "calc", "expression", "tool_conversation"]
