"""HTML table clean-up for scoring: a lenient parser, OmniDocBench's table normalisation, and cell texts.

Quick check from a shell::

    python -c "from unlimited_ocr.eval.table_html import *; print(normalize_table_html('<table><thead><tr><th>a</th></tr></thead></table>'))"
    # -> <html><body><table border="1" ><tr><td>a</td></tr></table></body></html>

The official OmniDocBench code parses tables with BeautifulSoup's ``html.parser`` backend and re-serialises
them before its regex clean-up, and it reads the text of unmatched predicted cells with ``Tag.string``. Both
depend on how that parser repairs sloppy model output (unclosed cells, stray end tags, whitespace-only text).
To get the same numbers without another dependency, :class:`_LenientTree` builds the same tree from Python's
own ``html.parser`` tokenizer (the one BeautifulSoup drives) with the same repair rules, and
:func:`_serialize` writes it back the way BeautifulSoup's ``str()`` does.
"""

from __future__ import annotations

import html
import re
import unicodedata
from html.entities import html5 as _HTML5_ENTITIES
from html.parser import HTMLParser

__all__ = ["normalize_table_html", "table_cell_strings", "contains_table"]

# Elements that never have content: closed as soon as they open, written as <br/>.
_VOID = frozenset(
    "area base br col embed hr img input keygen link menuitem meta param source track wbr "
    "basefont bgsound command frame image isindex nextid spacer".split()
)
_PRESERVE_WHITESPACE = frozenset({"pre", "textarea"})
# Attributes that hold space-separated lists: their whitespace is collapsed to single spaces on output.
_LIST_ATTRIBUTES_ANY = frozenset({"class", "accesskey", "dropzone"})
_LIST_ATTRIBUTES_BY_TAG = {
    "a": {"rel", "rev"}, "link": {"rel", "rev"}, "td": {"headers"}, "th": {"headers"},
    "form": {"accept-charset"}, "object": {"archive"}, "area": {"rel"}, "icon": {"sizes"},
    "iframe": {"sandbox"}, "output": {"for"},
}
_ASCII_SPACES = "\x20\x0a\x09\x0c\x0d"
_NON_WHITESPACE = re.compile(r"\S+")


class _Node:
    """A text-like leaf: kind is 'text', 'comment', 'doctype', 'declaration', 'cdata' or 'pi'."""

    __slots__ = ("kind", "data", "parent")

    def __init__(self, kind: str, data: str):
        self.kind, self.data, self.parent = kind, data, None


class _Element:
    __slots__ = ("name", "attrs", "children", "parent")

    def __init__(self, name: str, attrs: dict[str, str]):
        self.name, self.attrs, self.children, self.parent = name, attrs, [], None

    def append(self, child) -> None:
        child.parent = self
        self.children.append(child)

    def iter_elements(self, name: str):
        """All descendant elements called ``name``, in document order."""
        for child in self.children:
            if isinstance(child, _Element):
                if child.name == name:
                    yield child
                yield from child.iter_elements(name)

    def replace_with(self, replacements: list) -> None:
        """Put ``replacements`` where this element was (used for unwrap and for <math> -> text)."""
        siblings = self.parent.children
        position = next(i for i, c in enumerate(siblings) if c is self)
        for node in replacements:
            node.parent = self.parent
        siblings[position : position + 1] = replacements
        self.parent = None

    def single_string(self) -> str | None:
        """BeautifulSoup's ``Tag.string``: the text of the only child, following single-child chains."""
        if len(self.children) != 1:
            return None
        child = self.children[0]
        if isinstance(child, _Node):
            return child.data
        return child.single_string()


class _LenientTree(HTMLParser):
    """Builds a tree with BeautifulSoup(html.parser)'s rules: no implicit closing of cells or rows, an end tag
    closes back to the nearest open element of that name (and is ignored when none is open), void elements
    close at once, and whitespace-only text collapses to a single newline or space."""

    def __init__(self, markup: str):
        super().__init__(convert_charrefs=False)
        self.root = _Element("[document]", {})
        self._stack = [self.root]
        self._pending_text: list[str] = []
        self._closed_voids: list[str] = []  # void tags already closed, so a later </br> is swallowed
        self.feed(markup)
        self.close()
        self._flush_text()

    # -- tree building ------------------------------------------------------------------------------------
    def _flush_text(self, kind: str = "text") -> None:
        if not self._pending_text:
            return
        text = "".join(self._pending_text)
        self._pending_text = []
        inside_pre = any(e.name in _PRESERVE_WHITESPACE for e in self._stack)
        if not inside_pre and all(ch in _ASCII_SPACES for ch in text):
            text = "\n" if "\n" in text else " "
        self._stack[-1].append(_Node(kind, text))

    def _open(self, tag: str, attrs, close_void: bool) -> None:
        self._flush_text()
        attributes: dict[str, str] = {}
        for key, value in attrs:
            attributes[key] = "" if value is None else value  # a repeated attribute keeps its last value
        list_attrs = _LIST_ATTRIBUTES_ANY | _LIST_ATTRIBUTES_BY_TAG.get(tag, set())
        for key in attributes.keys() & list_attrs:
            attributes[key] = " ".join(_NON_WHITESPACE.findall(attributes[key]))
        element = _Element(tag, attributes)
        self._stack[-1].append(element)
        self._stack.append(element)
        if close_void and tag in _VOID:
            self._close(tag, swallow_repeated_void=False)
            self._closed_voids.append(tag)

    def _close(self, tag: str, swallow_repeated_void: bool = True) -> None:
        if swallow_repeated_void and tag in self._closed_voids:
            self._closed_voids.remove(tag)
            return
        self._flush_text()
        if not any(e.name == tag for e in self._stack[1:]):
            return  # stray end tag: nothing to close
        while self._stack[-1].name != tag:
            self._stack.pop()
        self._stack.pop()

    # -- tokenizer callbacks ------------------------------------------------------------------------------
    def handle_starttag(self, tag, attrs):
        self._open(tag, attrs, close_void=True)

    def handle_startendtag(self, tag, attrs):
        self._open(tag, attrs, close_void=False)
        self._close(tag, swallow_repeated_void=False)

    def handle_endtag(self, tag):
        self._close(tag)

    def handle_data(self, data):
        self._pending_text.append(data)

    def handle_charref(self, name):
        self._pending_text.append(html.unescape(f"&#{name};"))

    def handle_entityref(self, name):
        # Unknown entities stay literal (without the ';' the tokenizer consumed), as BeautifulSoup does.
        self._pending_text.append(_HTML5_ENTITIES.get(name + ";", "&" + name))

    def handle_comment(self, data):
        self._flush_text()
        self._pending_text.append(data)
        self._flush_text("comment")

    def handle_decl(self, decl):
        self._flush_text()
        self._stack[-1].append(_Node("doctype", decl[len("DOCTYPE "):]))

    def unknown_decl(self, data):
        self._flush_text()
        if data.upper().startswith("CDATA["):
            self._stack[-1].append(_Node("cdata", data[len("CDATA["):]))
        else:
            self._stack[-1].append(_Node("declaration", data))

    def handle_pi(self, data):
        self._flush_text()
        self._stack[-1].append(_Node("pi", data))


def _escape_minimal(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _quote_attribute(value: str) -> str:
    value = _escape_minimal(value)
    if '"' in value:
        if "'" in value:
            return '"' + value.replace('"', "&quot;") + '"'
        return "'" + value + "'"
    return '"' + value + '"'


_LEAF_FORMATS = {
    "comment": "<!--{}-->", "doctype": "<!DOCTYPE {}>", "declaration": "<!{}>",
    "cdata": "<![CDATA[{}]]>", "pi": "<?{}>",
}


def _serialize(node) -> str:
    if isinstance(node, _Node):
        if node.kind == "text":
            return _escape_minimal(node.data)
        return _LEAF_FORMATS[node.kind].format(node.data)
    inner = "".join(_serialize(child) for child in node.children)
    if node.name == "[document]":
        return inner
    # BeautifulSoup's default formatter writes attributes sorted by name.
    attributes = "".join(f" {key}={_quote_attribute(value)}" for key, value in sorted(node.attrs.items()))
    if not node.children and node.name in _VOID:
        return f"<{node.name}{attributes}/>"
    return f"<{node.name}{attributes}>{inner}</{node.name}>"


def _unwrap_all(root: _Element, name: str) -> None:
    for element in list(root.iter_elements(name)):
        if element.parent is not None:
            element.replace_with(list(element.children))


def _canonical_table_markup(markup: str) -> str:
    """Header cells become body cells, <thead>/<span> wrappers go, MathML becomes ``$alttext$``."""
    root = _LenientTree(markup).root
    for cell in root.iter_elements("th"):
        cell.name = "td"
    _unwrap_all(root, "thead")
    for math in list(root.iter_elements("math")):
        if math.parent is not None:
            math.replace_with([_Node("text", "$" + math.attrs.get("alttext", "") + "$")])
    _unwrap_all(root, "span")
    return _serialize(root)


_TABLE_BODY = re.compile(r"<table\b[^>]*>(.*)</table>", re.DOTALL | re.IGNORECASE)
# Presentation attributes carry no table content; each pattern is applied to the whole string in turn.
_PRESENTATION_ATTRIBUTES = tuple(
    re.compile(p) for p in ('( style=".*?")', '( height=".*?")', '( width=".*?")', '( align=".*?")', '( class=".*?")')
)
_INLINE_WRAPPERS = ("<sup>", "</sup>", "<sub>", "</sub>", "<span>", "</span>", "<div>", "</div>", "<p>", "</p>",
                    '<spandata-span-identity="">')


def contains_table(text: str) -> bool:
    """True when the text has a ``<table`` opening tag (spaces ignored, as the official check does)."""
    return "<table" in text.replace(" ", "").replace("'", '"')


def normalize_table_html(text: str) -> str:
    """OmniDocBench's HTML table normalisation; returns ``''`` when there is no table.

    Output is one line: ``<html><body><table border="1" >ROWS</table></body></html>`` with header cells as
    ``<td>``, no ``<thead>/<tbody>``, no style/size/class attributes, no inline wrappers (sup/sub/span/div/p),
    entities decoded, Unicode NFKC-folded and whitespace runs collapsed. Both TEDS and the table edit
    distance are computed on this form.
    """
    if not contains_table(text):
        return ""
    flat = html.unescape(_canonical_table_markup(text)).replace("\n", "")
    flat = unicodedata.normalize("NFKC", flat).strip()
    flat = "".join(_TABLE_BODY.findall(flat))  # greedy: from the first <table> to the last </table>
    for pattern in _PRESENTATION_ATTRIBUTES:
        flat = pattern.sub("", flat)
    flat = re.sub("</?tbody>", "", flat)
    flat = re.sub(r"\s+", " ", flat)
    flat = '<html><body><table border="1" >' + flat + "</table></body></html>"
    for wrapper in _INLINE_WRAPPERS:
        flat = flat.replace(wrapper, "")
    return re.sub("<colgroup>.*?</colgroup>", "", flat)


def table_cell_strings(markup: str) -> list[str | None]:
    """Text of every ``<td>`` (document order) when the cell holds a single string, else ``None``.

    Used to turn a predicted table that matched no ground-truth table back into text blocks.
    """
    root = _LenientTree(markup).root
    return [cell.single_string() for cell in root.iter_elements("td")]
