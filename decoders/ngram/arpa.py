"""ARPA files (plain or gzip): a streaming reader and a writer, in NeMo's token convention by default.

Token id `i` is written as the single character `chr(i + 100)`; `<s>`, `</s>` and `<unk>` keep their names
and get the negative ids `BOS_ID`, `EOS_ID`, `UNK_ID`. Words are separated by ASCII spaces or tabs only:
`str.split()` would also split on characters such as `chr(133)` (NEL) or `chr(160)`, which are tokens here.
Probabilities and backoffs stay in log10, as written; `decoders/ngram/compile.py` converts to natural log.
Word-level files (`decoders/ngram/word_lm.py`) go through the same reader and writer, with their own mapping
between words and ids (`symbol_id`, `name`).
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

TOKEN_OFFSET = 100  # token id i <-> chr(i + TOKEN_OFFSET)
BOS_ID = -1
EOS_ID = -2
UNK_ID = -3
KENLM_MISSING_UNK_LOG10 = -100.0  # what KenLM substitutes when an ARPA file has no <unk>
SPECIAL_IDS = {"<s>": BOS_ID, "</s>": EOS_ID, "<unk>": UNK_ID}
SPECIAL_NAMES = {value: key for key, value in SPECIAL_IDS.items()}
_SECTION = re.compile(r"^\\(\d+)-grams:$")
_COUNT = re.compile(r"^ngram\s+(\d+)\s*=\s*(\d+)$")


class ArpaFormatError(ValueError):
    """Malformed ARPA input; the message names the file and the line."""


def token_to_id(token: str) -> int:
    """`chr(i + 100)` -> i; `<s>`, `</s>`, `<unk>` -> their negative ids. Raises ValueError otherwise."""
    special = SPECIAL_IDS.get(token)
    if special is not None:
        return special
    if len(token) != 1 or ord(token) < TOKEN_OFFSET:
        raise ValueError(
            f"token {token!r} is not a token-level symbol (one character chr(id + {TOKEN_OFFSET})): this looks like "
            "a word-level ARPA; build a token-level LM with `python jobs/build_lm.py`"
        )
    return ord(token) - TOKEN_OFFSET


def id_to_token(token_id: int) -> str:
    """Inverse of `token_to_id`."""
    if token_id < 0:
        return SPECIAL_NAMES[token_id]
    return chr(token_id + TOKEN_OFFSET)


class ArpaNgram(NamedTuple):
    order: int
    tokens: tuple[int, ...]  # token ids, specials negative
    log10_prob: float
    log10_backoff: float  # 0.0 when the line has none


@dataclass
class ArpaModel:
    """All n-grams of an ARPA file, as arrays per order (index k-1 holds order k)."""

    declared_counts: list[int]  # from the \\data\\ header
    tokens: list[np.ndarray]  # [n_k, k] int64
    log10_probs: list[np.ndarray]  # [n_k] float64
    log10_backoffs: list[np.ndarray]  # [n_k] float64

    @property
    def max_order(self) -> int:
        return len(self.declared_counts)


class _TokenIds(dict):
    """token -> id, converting each token once, when first seen (with `symbol_id`, `token_to_id` by default)."""

    def __init__(self, symbol_id: Callable[[str], int] = token_to_id) -> None:
        super().__init__()
        self.symbol_id = symbol_id

    def __missing__(self, token: str) -> int:
        self[token] = self.symbol_id(token)
        return self[token]


def _is_gzip(path: str | Path) -> bool:
    """Told by the magic bytes, not the name."""
    with open(path, "rb") as raw:
        return raw.read(2) == b"\x1f\x8b"


def open_text(path: str | Path) -> io.TextIOBase:
    """Open a plain or gzip text file as UTF-8."""
    opener = gzip.open if _is_gzip(path) else open
    return opener(path, "rt", encoding="utf-8", newline="\n")


def _open_binary(path: str | Path) -> io.BufferedIOBase:
    """A plain or gzip file, opened for reading bytes."""
    return gzip.open(path, "rb") if _is_gzip(path) else open(path, "rb")


def iter_arpa(path: str | Path, symbol_id: Callable[[str], int] = token_to_id) -> Iterator[list[int] | ArpaNgram]:
    """Stream an ARPA file: first the declared counts per order (a list), then every n-gram in file order.

    Checks the structure as it goes (`\\data\\` first, then the counts, sections in order and none unknown,
    field counts, numbers, declared counts, `\\end\\`) and raises `ArpaFormatError` naming the file, the line
    number and the line. `symbol_id` maps each word of the file to an int id: token-level symbols by default
    (`token_to_id`); `decoders/ngram/word_lm.py` passes a word vocabulary's.
    """
    path = str(path)
    declared: dict[int, int] = {}
    order = 0  # current section; 0 = header
    seen_in_section = 0
    ended = False
    header_done = False
    seen_data = False
    known = _TokenIds(symbol_id)
    with _open_binary(path) as lines:  # decoded line by line, so that bad UTF-8 is found on its line
        line_number = 0

        def fail(message: str, line: str) -> ArpaFormatError:
            return ArpaFormatError(f"{path}:{line_number}: {message}: {line!r}")

        try:
            for line_number, raw in enumerate(lines, start=1):  # noqa: B007 (fail reads it)
                if ended:
                    continue  # anything after \end\ is ignored, as KenLM does
                try:
                    line = raw.decode("utf-8").rstrip("\r\n").strip(" \t")
                except UnicodeDecodeError as error:
                    raise ArpaFormatError(f"{path}:{line_number}: not UTF-8 text ({error})") from None
                if not line:
                    continue
                if order == 0 and not header_done:
                    if line == "\\data\\" and not seen_data:
                        seen_data = True
                        continue
                    section = _SECTION.match(line)
                    if not seen_data:  # as KenLM: the first line that is not blank must be \data\
                        if section is not None:
                            raise fail("no '\\data\\' header and no 'ngram N=count' lines before the first "
                                       "section", line)
                        raise fail("expected '\\data\\' (the ARPA header) as the first line that is not blank",
                                   line)
                    match = _COUNT.match(line)
                    if match:
                        if int(match.group(1)) in declared:
                            raise fail(f"the count of {match.group(1)}-grams is declared twice", line)
                        declared[int(match.group(1))] = int(match.group(2))
                        continue
                    if section is None:
                        what = "an unknown section" if line[0] == "\\" else "a broken header line"
                        raise fail(f"{what}: expected 'ngram N=count' or '\\1-grams:'", line)
                    if not declared:
                        raise fail("no 'ngram N=count' lines before the first section", line)
                    if sorted(declared) != list(range(1, len(declared) + 1)):
                        raise fail(f"declared orders must be 1..N, got {sorted(declared)}", line)
                    header_done = True
                    yield [declared[k] for k in range(1, len(declared) + 1)]
                    # fall through to section handling below
                section = _SECTION.match(line) if line[0] == "\\" else None
                if line[0] == "\\" and section is None and line != "\\end\\":
                    raise fail("an unknown section: expected '\\N-grams:' or '\\end\\'", line)
                if section is not None or line == "\\end\\":
                    if order > 0 and seen_in_section != declared[order]:
                        raise fail(f"the {order}-grams section holds {seen_in_section} entries but the header "
                                   f"declares {declared[order]}", line)
                    if line == "\\end\\":
                        if order != len(declared):
                            raise fail(f"\\end\\ after the {order}-grams section; the header declares "
                                       f"{len(declared)} orders", line)
                        ended = True
                        continue
                    new_order = int(section.group(1))
                    if new_order != order + 1 or new_order > len(declared):
                        raise fail(f"expected section \\{order + 1}-grams:", line)
                    order, seen_in_section = new_order, 0
                    continue
                if order == 0:
                    raise fail("n-gram line before any section", line)
                fields = line.replace("\t", " ").split(" ")  # ASCII separators only (see module docstring)
                if "" in fields:  # runs of separators
                    fields = [field for field in fields if field]
                if len(fields) not in (order + 1, order + 2):
                    raise fail(f"a {order}-gram line needs {order + 1} or {order + 2} fields, got {len(fields)}",
                               line)
                try:
                    log10_prob = float(fields[0])
                    log10_backoff = float(fields[order + 1]) if len(fields) == order + 2 else 0.0
                except ValueError:
                    raise fail("probability and backoff must be numbers", line) from None
                if log10_prob > 0.0 or log10_prob != log10_prob:
                    raise fail("log10 probability must be <= 0", line)
                try:
                    tokens = tuple(map(known.__getitem__, fields[1 : order + 1]))
                except ValueError as error:
                    raise fail(str(error), line) from None
                seen_in_section += 1
                yield ArpaNgram(order, tokens, log10_prob, log10_backoff)
        except (EOFError, gzip.BadGzipFile, zlib.error) as error:
            raise ArpaFormatError(f"{path}:{line_number + 1}: a broken gzip stream ({error})") from None
        if not header_done:
            raise ArpaFormatError(f"{path}:{line_number}: no ARPA header ('\\data\\' and 'ngram N=count') found")
        if not ended:
            raise ArpaFormatError(f"{path}:{line_number}: the file ends before '\\end\\'")


def read_arpa(path: str | Path, symbol_id: Callable[[str], int] = token_to_id) -> ArpaModel:
    """Read a whole ARPA file into per-order arrays (streaming: no line list is kept); `symbol_id` as in
    `iter_arpa`."""
    stream = iter_arpa(path, symbol_id)
    declared = next(stream)
    tokens: list[list[tuple[int, ...]]] = [[] for _ in declared]
    probs: list[list[float]] = [[] for _ in declared]
    backoffs: list[list[float]] = [[] for _ in declared]
    for ngram in stream:
        k = ngram.order - 1
        tokens[k].append(ngram.tokens)
        probs[k].append(ngram.log10_prob)
        backoffs[k].append(ngram.log10_backoff)
    return ArpaModel(
        declared_counts=declared,
        tokens=[np.array(t, dtype=np.int64).reshape(len(t), k + 1) for k, t in enumerate(tokens)],
        log10_probs=[np.array(p, dtype=np.float64) for p in probs],
        log10_backoffs=[np.array(b, dtype=np.float64) for b in backoffs],
    )


def backoff_log10_prob(ngrams: dict[tuple[int, ...], tuple[float, float]], context: tuple[int, ...], token: int,
                       unk_log10: float) -> float:
    """log10 p(token | context) by ARPA's back-off formula over {ids: (log10 prob, log10 backoff)}: the longest
    listed n-gram of `token` after a suffix of `context`, plus the backoffs of the contexts dropped on the way
    (a context not listed backs off by 0); `unk_log10` where not even the unigram is listed."""
    total = 0.0
    while True:
        listed = ngrams.get(context + (token,))
        if listed is not None:
            return total + listed[0]
        if not context:
            return total + unk_log10
        total += ngrams.get(context, (0.0, 0.0))[1]
        context = context[1:]


def add_missing_prefixes(ngrams: dict[tuple[int, ...], tuple[float, float]],
                         unk_log10: float = KENLM_MISSING_UNK_LOG10) -> list[tuple[int, ...]]:
    """In place: list every missing context of a listed n-gram (pruning by SRILM or varikn drops them).

    A created n-gram `h w` gets the probability the backoff formula gives it without the entry,
    `backoff(h) + p(w | h[1:])`, and backoff 0, so that no probability changes while a context reaches its
    longer n-grams (KenLM refuses files with missing contexts; after this it reads them with the same scores).
    Values are log10. Returns the created keys, shortest first.
    """

    # find them longest first, so that a created prefix gets its own missing prefixes; then give them
    # probabilities shortest first, so that each derivation sees only settled lower orders
    created: set[tuple[int, ...]] = set()
    for key in sorted((key for key in ngrams if len(key) > 1), key=len, reverse=True):
        prefix = key[:-1]
        while prefix and prefix not in ngrams and prefix not in created:
            created.add(prefix)
            prefix = prefix[:-1]
    ordered = sorted(created, key=lambda key: (len(key), key))
    for key in ordered:
        context, token = key[:-1], key[-1]  # h, w: the backoff of h, then p(w | h[1:])
        probability = (ngrams.get(context, (0.0, 0.0))[1] + backoff_log10_prob(ngrams, context[1:], token, unk_log10)
                       if context else unk_log10)
        ngrams[key] = (probability, 0.0)
    return ordered


def write_arpa(path: str | Path, ngrams: dict[tuple[int, ...], tuple[float, float]],
               name: Callable[[int], str] = id_to_token, *, max_order: int | None = None) -> None:
    """Write {ids: (log10 prob, log10 backoff)} as an ARPA file (gzip where `path` ends in `.gz`) in KenLM's
    spelling: fields separated by tabs, each order's n-grams sorted by id, a backoff only where it is not 0 (as
    `iter_arpa`, KenLM reads a missing one as 0). `name` spells an id (`id_to_token` by default, the inverse of
    `iter_arpa`'s `symbol_id`); `max_order` declares orders past the longest key, left empty (as a file read
    may have declared them)."""
    max_order = max([max_order or 0, *map(len, ngrams)])
    by_order: list[list[tuple[int, ...]]] = [[] for _ in range(max_order)]
    for key in ngrams:
        by_order[len(key) - 1].append(key)
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8", newline="\n") as out:
        out.write("\\data\\\n")
        for k, keys in enumerate(by_order, start=1):
            out.write(f"ngram {k}={len(keys)}\n")
        for k, keys in enumerate(by_order, start=1):
            out.write(f"\n\\{k}-grams:\n")
            for key in sorted(keys):
                log10_prob, log10_backoff = ngrams[key]
                words = " ".join(map(name, key))
                if k < max_order and log10_backoff != 0.0:
                    out.write(f"{log10_prob:.7g}\t{words}\t{log10_backoff:.7g}\n")
                else:
                    out.write(f"{log10_prob:.7g}\t{words}\n")
        out.write("\n\\end\\\n")
