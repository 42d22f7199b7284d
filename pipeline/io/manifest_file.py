"""A manifest file as numbered lines, whatever state it is in: read as bytes, decompressed as its suffix says,
cut at "\n", and stopped with one `Broken` where it cannot be read on.

- Compression: `.gz` is read by `_Gunzip` (zlib in small steps: Python's `GzipFile` drops up to 128 KiB before a
  corrupt spot, and every complete line before a break must come out); `.bz2`, `.xz` and the other suffixes
  fsspec knows through fsspec. Data cut short or corrupt: every complete line before the break, then a
  `Broken` saying after which line.
- Text: lines are UTF-8, decoded one by one (`decode_line`: a bad byte spoils its line only; a UTF-8 BOM at the
  start of any line is skipped, as concatenated files carry one each); a file starting with a UTF-16 BOM is
  read as UTF-16.
- A binary file (an audio file given as a manifest) is one `Broken`: a manifest is binary when its first
  non-blank line does not start with "{" and holds, in its first 8 KiB, a control byte other than tab, CR, LF,
  VT, FF, or bytes that are not UTF-8.
- A local file that is not a regular file (a FIFO would block forever) is refused before it is opened.
"""

from __future__ import annotations

import codecs
import contextlib
import gzip
import lzma
import os
import re
import stat
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import fsspec
import fsspec.compression
import fsspec.utils

from pipeline.io.uris import local_path

BINARY_SAMPLE_BYTES = 8 << 10  # bytes of the first non-blank line that tell a binary file from a manifest
_CHUNK_BYTES = 256 << 10
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_ASCII_SPACE = " \t\r\n\v\f"
_NOT_TEXT_BYTE = re.compile(rb"[\x00-\x08\x0e-\x1f]")
_NOT_TEXT_CHAR = re.compile("[\x00-\x08\x0e-\x1f\ud800-\udfff]")
SURROGATE = re.compile("[\ud800-\udfff]")
_STRAY_BYTE = "\udfff"  # stands for a UTF-16 file's odd last byte, so that its line becomes an error row
_DECOMPRESSION_ERRORS = (EOFError, zlib.error, lzma.LZMAError, gzip.BadGzipFile, zipfile.BadZipFile)


@dataclass(frozen=True)
class Broken:
    """The manifest cannot be read past here: one error row at `line_number`."""

    line_number: int
    message: str
    what: str  # what failed, hashed into the row's id


LIMIT_REACHED = object()  # `manifest_lines` read its `limit_bytes`: more may follow


def cause(error: BaseException) -> str:
    """`Type: message` on one line, at most about 200 characters."""
    name = "zlib.error" if isinstance(error, zlib.error) else type(error).__name__
    text = " ".join(str(error).split())
    return f"{name}: {text[:200]}" if text else name


class _Gunzip:
    """The decompressed bytes of gzip data (members one after another, zero padding between them allowed), read
    in small steps with zlib, so that a corrupt spot costs only what follows it: `gzip.GzipFile` decompresses
    128 KiB of input at a time and loses all of it at an error."""

    STEP_BYTES = 4 << 10

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.pending = b""  # compressed bytes read but not yet decompressed
        self.decompressor: Any = None  # None between members
        self.members = 0

    def read1(self, size: int) -> bytes:
        while True:
            if len(self.pending) < 2:
                more = self.raw.read(self.STEP_BYTES)
                if not more and not self.pending:
                    if self.decompressor is not None:
                        raise EOFError("compressed file ended before the end-of-stream marker was reached")
                    return b""
                self.pending += more
                if more:
                    continue
            if self.decompressor is None:
                if self.members:
                    self.pending = self.pending.lstrip(b"\0")
                    if not self.pending:
                        continue
                if not self.pending.startswith(b"\x1f\x8b"):
                    raise gzip.BadGzipFile(f"not gzip data (it starts with {self.pending[:8]!r})")
                self.decompressor = zlib.decompressobj(wbits=31)
                self.members += 1
            data = self.decompressor.decompress(self.pending, size)
            self.pending = self.decompressor.unconsumed_tail
            if self.decompressor.eof:
                self.pending = self.decompressor.unused_data + self.pending
                self.decompressor = None
            if data:
                return data


def _open_binary(uri: str) -> tuple[Any, str | None, contextlib.ExitStack]:
    """The manifest's decompressed bytes (a file-like object with `read1` or `read`), the compression inferred
    from its name, and what closes them."""
    closer = contextlib.ExitStack()
    local = local_path(uri)
    if local is None:
        handle = closer.enter_context(fsspec.open(uri, "rb"))
    else:
        local = os.path.expanduser(local)
        mode = os.stat(local).st_mode  # before opening: opening a FIFO would wait for a writer forever
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(f"{local} is a directory")
        if not stat.S_ISREG(mode):
            raise OSError(f"{local} is not a regular file")
        handle = closer.enter_context(open(local, "rb"))
    compression = fsspec.utils.infer_compression(local if local is not None else uri)
    if compression == "gzip":
        return _Gunzip(handle), compression, closer
    if compression is not None:
        handle = closer.enter_context(fsspec.compression.compr[compression](handle, mode="rb"))
    return handle, compression, closer


class _Lines:
    """Cuts bytes (or text) into lines at "\\n", numbering them from 1; what follows the last "\\n" waits."""

    def __init__(self, empty: bytes | str) -> None:
        self.empty, self.newline = empty, ("\n" if isinstance(empty, str) else b"\n")
        self.waiting: list[Any] = []
        self.waiting_size = 0
        self.line_number = 0  # lines handed out

    def feed(self, piece: Any, final: bool = False) -> list[tuple[int, Any]]:
        lines = []
        if self.newline in piece:
            parts = self.empty.join([*self.waiting, piece]).split(self.newline)
            self.waiting = [parts.pop()]
            self.waiting_size = len(self.waiting[0])
            for part in parts:
                self.line_number += 1
                lines.append((self.line_number, part))
        elif piece:
            self.waiting.append(piece)
            self.waiting_size += len(piece)
        if final and self.waiting_size:
            self.line_number += 1
            lines.append((self.line_number, self.pending()))
            self.waiting, self.waiting_size = [], 0
        return lines

    def pending(self) -> Any:
        return self.empty.join(self.waiting)


def _line_start(line: bytes | str) -> bytes | str:
    """A line less a BOM and leading ASCII whitespace: empty for a blank line, as the binary test sees it."""
    if isinstance(line, bytes):
        return line.removeprefix(codecs.BOM_UTF8).lstrip(_ASCII_SPACE.encode())
    return line.removeprefix("\ufeff").lstrip(_ASCII_SPACE)


def _binary_verdict(line: bytes | str, complete: bool) -> str | None:
    """Why a manifest whose first non-blank line is (or starts with, if not `complete`) `line` is no text
    manifest, or None: see the module docstring."""
    start = _line_start(line)
    lead = len(line) - len(start)
    sample = start[:BINARY_SAMPLE_BYTES]
    if isinstance(sample, str):
        if sample.startswith("{"):
            return None
        found = _NOT_TEXT_CHAR.search(sample)
        return None if found is None else (
            f"not a text manifest: binary data (U+{ord(found.group()):04X} at column {lead + found.start() + 1})")
    if sample.startswith(b"{"):
        return None
    if sample.startswith(b"\x1f\x8b"):
        return "not a text manifest: gzip data in a file whose name does not end in .gz"
    found = _NOT_TEXT_BYTE.search(sample)
    if found is not None:
        at = found.start()
        return f"not a text manifest: binary data (byte 0x{sample[at]:02x} at column {lead + at + 1})"
    try:
        codecs.getincrementaldecoder("utf-8")().decode(sample, final=complete and len(sample) == len(start))
    except UnicodeDecodeError as error:
        return (f"not a text manifest: not UTF-8 or UTF-16 text (byte 0x{sample[error.start]:02x} at column "
                f"{lead + error.start + 1})")
    return None


def _read_failure(error: Exception, compression: str | None, lines_read: int, at_start: bool) -> Broken:
    decompressing = compression is not None and (
        isinstance(error, _DECOMPRESSION_ERRORS) or (compression == "bz2" and type(error) is OSError))
    if decompressing and at_start and isinstance(error, gzip.BadGzipFile):
        message = f"not a gzip file ({cause(error)})"
    elif decompressing and at_start:
        message = f"not a {compression} file, or broken at its start ({cause(error)})"
    elif decompressing:
        message = f"compressed data broken after line {lines_read} ({cause(error)})"
    else:
        message = f"reading stopped after line {lines_read} ({cause(error)})"
    return Broken(lines_read + 1, message, f"broken after line {lines_read}")


def manifest_lines(uri: str, limit_bytes: int | None = None) -> Iterator[Any]:
    """The lines of one manifest, as (line number, line) with the line in bytes (UTF-8, decoded line by line)
    or text (a UTF-16 file), without its "\\n"; then, where the file cannot be read on, one `Broken`; or
    `LIMIT_REACHED` once `limit_bytes` decompressed bytes were read (the line they cut is not given). Never
    raises."""
    try:
        handle, compression, closer = _open_binary(uri)
    except Exception as error:  # fsspec backends raise their own types (botocore, gcsfs, aiohttp ...)
        yield Broken(1, f"cannot open the manifest ({cause(error)})", "open")
        return
    try:
        read = getattr(handle, "read1", None) or handle.read  # read1: gzip's read(n) drops what it had at a break
        decoder: Any = None
        lines: _Lines | None = None
        head = b""
        bytes_read = 0
        checked = False  # whether the first non-blank line was tested for binary data
        while True:
            if limit_bytes is not None and bytes_read >= limit_bytes:
                yield LIMIT_REACHED
                return
            failure: Exception | None = None
            try:
                chunk = read(_CHUNK_BYTES)
            except Exception as error:  # the bytes before it are still handed out
                chunk, failure = b"", error
            if lines is None:  # the first bytes tell UTF-16 from UTF-8
                head += chunk
                if chunk and len(head) < 3:
                    continue
                if head[:2] in _UTF16_BOMS:
                    decoder = codecs.getincrementaldecoder("utf-16")("surrogatepass")
                lines = _Lines("" if decoder else b"")
                chunk, head = head, b""
            bytes_read += len(chunk)
            at_end = not chunk and failure is None
            piece: Any = chunk
            if decoder is not None:
                try:
                    piece = decoder.decode(chunk, final=at_end)
                except UnicodeDecodeError:  # only at the end: an odd last byte
                    piece = _STRAY_BYTE
            for item in lines.feed(piece, final=at_end):
                if not checked and _line_start(item[1]):
                    checked = True
                    verdict = _binary_verdict(item[1], complete=True)
                    if verdict is not None:
                        yield Broken(item[0], verdict, "binary")
                        return
                yield item
            if failure is not None:
                yield _read_failure(failure, compression, lines.line_number, bytes_read == 0)
                return
            if at_end:
                return
            if not checked and lines.waiting_size >= BINARY_SAMPLE_BYTES:
                waiting = lines.pending()
                if len(_line_start(waiting)) >= BINARY_SAMPLE_BYTES:
                    checked = True
                    verdict = _binary_verdict(waiting, complete=False)
                    if verdict is not None:
                        yield Broken(lines.line_number + 1, verdict, "binary")
                        return
    finally:
        with contextlib.suppress(Exception):
            closer.close()


def decode_line(line: bytes | str) -> tuple[str | None, bytes, str | None]:
    """A line as (text less its "\\r" and BOM, or None; its bytes; why it is not text, or None)."""
    if isinstance(line, bytes):
        raw = line.removesuffix(b"\r")
        try:
            return raw.decode("utf-8").removeprefix("\ufeff"), raw, None
        except UnicodeDecodeError as error:
            return None, raw, f"not UTF-8 (byte 0x{raw[error.start]:02x} at column {error.start + 1})"
    text = line.removesuffix("\r")
    raw = text.encode("utf-8", "surrogatepass")
    found = SURROGATE.search(text)
    if found is not None:
        return None, raw, f"not UTF-16 text (an unpaired surrogate or a stray byte at column {found.start() + 1})"
    return text.removeprefix("\ufeff"), raw, None
