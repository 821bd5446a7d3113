"""Typed JSON: builtin values as JSON text that keeps their exact types.

``encode`` runs inside the sandbox (a ``call`` program's return value, the
assert server's answers); ``decode_typed`` runs in the assert harness and in
the parent (``call_outputs``, ``property`` judges).  The sandbox gets this
file as text (spliced into ``grading/sandbox_child.py``'s script), so it imports
nothing at the top and nothing of ours.

Not here: the bounded, hash-free decoding the parent uses to compare a
value with an expectation (``grading._returned_value_matches``).
"""


def encode(value):
    """Typed JSON text of ``value``, built from exact builtin types only.

    Subclasses of int/float/str/list/... are encoded as their base value
    (their methods are bypassed); any other type raises TypeError.  JSON
    lists are lists; tuples, sets, frozensets, dicts, bytes and complex
    numbers are one-key objects, e.g. ``{"tuple": [1, 2]}``.
    """
    from _json import encode_basestring_ascii

    parts = []
    encode_into(value, parts, encode_basestring_ascii)
    return "".join(parts)


def encode_into(value, parts, quote):
    kind = type(value)
    if value is None:
        parts.append("null")
    elif kind is bool:
        parts.append("true" if value else "false")
    elif issubclass(kind, int):
        parts.append(int.__repr__(value))
    elif issubclass(kind, float):
        text = float.__repr__(value)
        parts.append({"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}.get(text, text))
    elif issubclass(kind, str):
        parts.append(quote(str.__str__(value)))
    elif issubclass(kind, list):
        encode_items(list.__iter__(value), parts, quote, "[", "]")
    elif issubclass(kind, dict):
        pairs = ([key, item] for key, item in dict.items(value))
        encode_items(pairs, parts, quote, '{"dict": [', "]}")
    elif issubclass(kind, (tuple, set, frozenset)):
        base = next(b for b in (tuple, frozenset, set) if issubclass(kind, b))
        opening = '{"' + base.__name__ + '": ['
        encode_items(base.__iter__(value), parts, quote, opening, "]}")
    elif issubclass(kind, (bytes, bytearray)):
        parts.append('{"bytes": "' + bytes(value).hex() + '"}')
    elif issubclass(kind, complex):
        exact = complex.__add__(value, 0j)  # bypasses a subclass's real/imag
        encode_items([exact.real, exact.imag], parts, quote, '{"complex": [', "]}")
    else:
        raise TypeError("cannot send a value of type " + kind.__name__)


def encode_items(items, parts, quote, opening, closing):
    parts.append(opening)
    for index, item in enumerate(items):
        if index:
            parts.append(", ")
        encode_into(item, parts, quote)
    parts.append(closing)


def decode_typed(text):
    """Inverse of encode (the parent's comparison with an expectation never
    builds these values: see grading._normalize_typed_object).

    >>> decode_typed('[1, {"tuple": [2.5, "x"]}, {"dict": [[1, {"set": [3]}]]}]')
    [1, (2.5, 'x'), {1: {3}}]
    """
    import json

    return decode_typed_node(json.loads(text))


def decode_typed_node(node):
    kind = type(node)
    if kind is list:
        return [decode_typed_node(item) for item in node]
    if kind is not dict:
        return node
    if len(node) != 1:
        raise ValueError("a typed object must have exactly one key")
    ((tag, body),) = node.items()
    if tag == "bytes" and type(body) is str:
        return bytes.fromhex(body)
    if type(body) is not list:
        raise ValueError("malformed typed value")
    items = [decode_typed_node(item) for item in body]
    if tag == "dict":
        return {key: item for key, item in items}
    if tag == "complex":
        return complex(*items)
    builders = {"tuple": tuple, "set": set, "frozenset": frozenset}
    if tag not in builders:
        raise ValueError("unknown typed tag " + repr(tag))
    return builders[tag](items)
