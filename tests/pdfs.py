"""Small PDF files written byte by byte: well-formed ones with text pages, and hostile or broken ones.

No PDF writer is needed: a PDF with one font and `Tj` text operators is a few objects and a
cross-reference table. The hostile variants are the cases a vault may hold (a truncated
download, a damaged xref, a compression bomb, a page tree that claims a million pages or
contains itself, an encrypted file, nesting deep enough to exhaust a recursive parser).
"""

from __future__ import annotations

import zlib


def _escape(text: str) -> bytes:
    """A PDF literal string's body (Latin-1; other characters become `?`)."""
    raw = text.encode("latin-1", "replace")
    return raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")


def page_content(text: str) -> bytes:
    """A content stream that shows each line of `text` on its own line."""
    out = [b"BT /F1 12 Tf 14 TL 72 720 Td"]
    for line in text.split("\n"):
        out.append(b"(" + _escape(line) + b") Tj T*")
    out.append(b"ET")
    return b"\n".join(out)


def assemble(objects: list[bytes], root: int = 1, trailer_extra: bytes = b"") -> bytes:
    """A PDF of `objects` (object i + 1 is objects[i]) with a correct xref table and trailer."""
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for i, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n" % (len(objects) + 1)
    out += b"0000000000 65535 f \n"
    for off in offsets:
        out += b"%010d 00000 n \n" % off
    out += b"trailer\n<< /Size %d /Root %d 0 R %s>>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        root,
        trailer_extra,
        xref,
    )
    return bytes(out)


def _stream(data: bytes, compress: bool) -> bytes:
    if compress:
        data = zlib.compress(data)
        return b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(data) + data + b"\nendstream"
    return b"<< /Length %d >>\nstream\n" % len(data) + data + b"\nendstream"


def text_pdf(pages: list[str], compress: bool = False) -> bytes:
    """A well-formed PDF with one page per string of `pages` (Helvetica, one line per `\\n`)."""
    n = len(pages)
    # 1 catalog, 2 pages, 3 font, then (page, content) pairs.
    kids = b" ".join(b"%d 0 R" % (4 + 2 * i) for i in range(n))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % n,
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for i, text in enumerate(pages):
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (5 + 2 * i)
        )
        objects.append(_stream(page_content(text), compress))
    return assemble(objects)


def damaged_page_pdf(pages: list[str], damaged: int) -> bytes:
    """A well-formed PDF whose page number `damaged` (from 1) has a content stream under a filter no reader knows."""
    data = text_pdf(pages)
    objects = []
    for i in range(1, data.count(b" 0 obj\n") + 1):
        start = data.index(b"%d 0 obj\n" % i) + len(b"%d 0 obj\n" % i)
        objects.append(data[start : data.index(b"\nendobj\n", start)])
    body = b"text under an unknown filter"
    objects[3 + 2 * (damaged - 1) + 1] = (
        b"<< /Length %d /Filter /Nonsense >>\nstream\n" % len(body) + body + b"\nendstream"
    )
    return assemble(objects)


def truncated_pdf(pages: list[str], keep: float = 0.6) -> bytes:
    """A download cut short: the first `keep` of a well-formed file (no xref, no trailer)."""
    data = text_pdf(pages)
    return data[: int(len(data) * keep)]


def broken_xref_pdf(pages: list[str]) -> bytes:
    """A file whose xref offsets and startxref point at the wrong bytes."""
    data = text_pdf(pages)
    head, _, _tail = data.rpartition(b"startxref\n")
    wrong = bytearray(head)
    at = wrong.find(b"xref\n0 ")
    table = wrong[at:].replace(b" 00000 n", b" 00000 n").replace(b"00000000", b"00000099")
    wrong[at:] = table
    return bytes(wrong) + b"startxref\n7\n%%EOF\n"


def bomb_pdf(megabytes: int = 200) -> bytes:
    """One page whose content stream inflates from a few hundred KB to `megabytes` MB."""
    payload = zlib.compress(b"0 0 m " * (megabytes * 1_000_000 // 6), 9)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Contents 5 0 R >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(payload) + payload + b"\nendstream",
    ]
    return assemble(objects)


def many_pages_pdf(kids: int, count: int = 1_000_000, text: str = "the same page again") -> bytes:
    """A page tree that claims `count` pages and lists one page object `kids` times."""
    refs = b" ".join([b"4 0 R"] * kids)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + refs + b"] /Count %d >>" % count,
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Contents 5 0 R >>",
        _stream(page_content(text), False),
    ]
    return assemble(objects)


def recursive_pdf() -> bytes:
    """A page tree that contains itself, and a page whose resources and contents refer to themselves."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [2 0 R 4 0 R] /Count 2 >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources 6 0 R /Contents [5 0 R 5 0 R] >>",
        _stream(page_content("loop page"), False),
        b"<< /Font << /F1 3 0 R >> /XObject << /X 7 0 R >> >>",
        b"<< /Type /XObject /Subtype /Form /BBox [0 0 10 10] /Resources 6 0 R /Length 8 >>\nstream\n/X Do   \nendstream",
    ]
    return assemble(objects)


def deep_pdf(depth: int = 100_000) -> bytes:
    """A page whose MediaBox is an array nested `depth` levels deep (a recursive parser's stack)."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox "
        + b"[" * depth
        + b"]" * depth
        + b" /Resources << /Font << /F1 3 0 R >> >> /Contents 5 0 R >>",
        _stream(page_content("deep page"), False),
    ]
    return assemble(objects)


def encrypted_pdf(pages: list[str]) -> bytes:
    """A file that declares RC4 encryption with a user password (its strings are not really encrypted)."""
    body = text_pdf(pages)
    objs_end = body.index(b"xref\n")
    n = body.count(b" 0 obj\n")
    enc = b"<< /Filter /Standard /V 1 /R 2 /O <" + b"11" * 32 + b"> /U <" + b"22" * 32 + b"> /P -4 >>"
    objects = []
    pos = 0
    for i in range(1, n + 1):
        start = body.index(b"%d 0 obj\n" % i, pos) + len(b"%d 0 obj\n" % i)
        end = body.index(b"\nendobj\n", start)
        objects.append(body[start:end])
        pos = end
    assert pos < objs_end
    objects.append(enc)
    return assemble(
        objects, trailer_extra=b"/Encrypt %d 0 R /ID [<%s> <%s>] " % (n + 1, b"ab" * 16, b"ab" * 16)
    )


def hostile_text_pdf() -> bytes:
    """A well-formed page whose text holds terminal escape sequences and other control characters."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Contents 5 0 R >>",
        _stream(b"BT /F1 12 Tf 72 720 Td (escape \x1b]0;owned\x07 title \x1b[2J cleared) Tj ET", False),
    ]
    return assemble(objects)


def repeated_form_pdf(times: int = 200, lines: int = 100, first_page: str = "") -> bytes:
    """A page that draws a form `times` times, each of which draws a form of `lines` text lines
    `times` times: a 6 KB file that keeps pypdf's text extraction busy for minutes (it stops after
    5,000 form drawings, but each one is parsed again, and the text grows with each).

    With `first_page`, that text is a plain page before the hostile one.
    """
    leaf = page_content("\n".join(f"line {i} of the drawn form" for i in range(lines)))
    draws = b"/X Do\n" * times
    font = b"/Font << /F1 3 0 R >>"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"",  # the page tree, once the pages are known
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources << "
        + font
        + b" /XObject << /X 5 0 R >> >> /Length %d >>\nstream\n" % len(draws)
        + draws
        + b"\nendstream",
        b"<< /Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources << "
        + font
        + b" >> /Length %d >>\nstream\n" % len(leaf)
        + leaf
        + b"\nendstream",
    ]
    kids = []
    for content in ([page_content(first_page)] if first_page else []) + [draws]:
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << "
            + font
            + b" /XObject << /X 4 0 R >> >> /Contents %d 0 R >>" % (len(objects) + 2)
        )
        kids.append(len(objects))
        objects.append(_stream(content, False))
    refs = b" ".join(b"%d 0 R" % k for k in kids)
    objects[1] = b"<< /Type /Pages /Kids [" + refs + b"] /Count %d >>" % len(kids)
    return assemble(objects)


#: Every hostile or broken sample by name, for tests and the benchmark.
HOSTILE = {
    "truncated": lambda: truncated_pdf(["first page text " * 40, "second page text " * 40]),
    "broken-xref": lambda: broken_xref_pdf(["broken cross reference table", "second page"]),
    "bomb-200MB": lambda: bomb_pdf(200),
    "claims-10^6-pages": lambda: many_pages_pdf(kids=1, count=1_000_000),
    "10^5-page-refs": lambda: many_pages_pdf(kids=100_000, count=100_000),
    "recursive": recursive_pdf,
    "deep-nesting": deep_pdf,
    "encrypted": lambda: encrypted_pdf(["secret text"]),
    "not-a-pdf": lambda: b"\x00\x01garbage" * 1000,
    "empty": lambda: b"",
}
