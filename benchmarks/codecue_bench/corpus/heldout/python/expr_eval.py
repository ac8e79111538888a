"""A tokenizer and recursive-descent evaluator for arithmetic expressions with variables.

Grammar:
    expr   := term (("+" | "-") term)*
    term   := factor (("*" | "/" | "%") factor)*
    factor := ("-" factor) | power
    power  := atom ("^" factor)?
    atom   := NUMBER | NAME | NAME "(" expr ("," expr)* ")" | "(" expr ")"
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum, auto


class Kind(Enum):
    NUMBER = auto()
    NAME = auto()
    OP = auto()
    LPAREN = auto()
    RPAREN = auto()
    COMMA = auto()
    END = auto()


@dataclass(frozen=True)
class Token:
    kind: Kind
    text: str
    offset: int


class ExpressionError(ValueError):
    def __init__(self, message: str, offset: int) -> None:
        super().__init__(f"{message} at offset {offset}")
        self.offset = offset


FUNCTIONS: dict[str, Callable[..., float]] = {"sqrt": math.sqrt, "min": min, "max": max, "abs": abs}
SINGLE_CHAR = {"(": Kind.LPAREN, ")": Kind.RPAREN, ",": Kind.COMMA}


def tokenize(source: str) -> list[Token]:
    tokens: list[Token] = []
    i = 0
    while i < len(source):
        ch = source[i]
        if ch.isspace():
            i += 1
        elif ch.isdigit() or ch == ".":
            start = i
            while i < len(source) and (source[i].isdigit() or source[i] == "."):
                i += 1
            tokens.append(Token(Kind.NUMBER, source[start:i], start))
        elif ch.isalpha() or ch == "_":
            start = i
            while i < len(source) and (source[i].isalnum() or source[i] == "_"):
                i += 1
            tokens.append(Token(Kind.NAME, source[start:i], start))
        elif ch in "+-*/%^":
            tokens.append(Token(Kind.OP, ch, i))
            i += 1
        elif ch in SINGLE_CHAR:
            tokens.append(Token(SINGLE_CHAR[ch], ch, i))
            i += 1
        else:
            raise ExpressionError(f"unexpected character {ch!r}", i)
    tokens.append(Token(Kind.END, "", len(source)))
    return tokens


class Parser:
    def __init__(self, source: str, variables: Mapping[str, float]) -> None:
        self.tokens = tokenize(source)
        self.pos = 0
        self.variables = variables

    def peek(self) -> Token:
        return self.tokens[self.pos]

    def advance(self) -> Token:
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def expect(self, kind: Kind) -> Token:
        token = self.advance()
        if token.kind is not kind:
            raise ExpressionError(f"expected {kind.name.lower()}, got {token.text!r}", token.offset)
        return token

    def parse(self) -> float:
        value = self.expr()
        self.expect(Kind.END)
        return value

    def expr(self) -> float:
        value = self.term()
        while self.peek().text in ("+", "-"):
            op = self.advance().text
            value = value + self.term() if op == "+" else value - self.term()
        return value

    def term(self) -> float:
        value = self.factor()
        while self.peek().text in ("*", "/", "%"):
            token = self.advance()
            right = self.factor()
            if token.text != "*" and right == 0:
                raise ExpressionError("division by zero", token.offset)
            value = value * right if token.text == "*" else value / right if token.text == "/" else value % right
        return value

    def factor(self) -> float:
        if self.peek().text == "-":
            self.advance()
            return -self.factor()
        base = self.atom()
        if self.peek().text == "^":
            self.advance()
            return base ** self.factor()  # right-associative: 2^3^2 == 2^9
        return base

    def atom(self) -> float:
        token = self.advance()
        if token.kind is Kind.NUMBER:
            if token.text.count(".") > 1:
                raise ExpressionError(f"bad number {token.text!r}", token.offset)
            return float(token.text)
        if token.kind is Kind.LPAREN:
            value = self.expr()
            self.expect(Kind.RPAREN)
            return value
        if token.kind is Kind.NAME:
            if self.peek().kind is Kind.LPAREN:
                return self.call(token)
            if token.text not in self.variables:
                raise ExpressionError(f"unknown variable {token.text!r}", token.offset)
            return float(self.variables[token.text])
        raise ExpressionError(f"unexpected {token.text or 'end of input'!r}", token.offset)

    def call(self, name: Token) -> float:
        function = FUNCTIONS.get(name.text)
        if function is None:
            raise ExpressionError(f"unknown function {name.text!r}", name.offset)
        self.expect(Kind.LPAREN)
        args = [self.expr()]
        while self.peek().kind is Kind.COMMA:
            self.advance()
            args.append(self.expr())
        self.expect(Kind.RPAREN)
        return float(function(*args))


def evaluate(source: str, variables: Mapping[str, float] | None = None) -> float:
    return Parser(source, variables or {}).parse()

