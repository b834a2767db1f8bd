// Python's str operations on UTF-8 bytes: code-point indexing, whitespace, strip/split, case
// mapping, repr(), and float formatting, so that templates see Python's results. Bytes that are
// not well-formed UTF-8 count as one code point each (only template text can hold them).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/chat/value.h"

namespace tpserve::chat {

// Decodes the code point at `pos`; an ill-formed byte counts as one unit (code point 0xFFFFFFFF).
size_t DecodeAt(std::string_view s, size_t pos, char32_t* cp);
// str.isspace(): bidirectional class WS, B or S, or category Zs.
bool IsPySpace(char32_t c);
void AppendCodePoint(char32_t cp, std::string* out);

// Byte offset of every code point's start, and the end offset last (size = code points + 1).
std::vector<size_t> CodePointOffsets(std::string_view s);
size_t CodePointCount(std::string_view s);

// str.strip / lstrip / rstrip: Python's whitespace when chars is nullopt, else those code points.
Str Strip(const Str& s, const std::optional<std::string>& chars, bool left, bool right);

// str.split(sep, maxsplit) (sep nullopt: runs of whitespace) and str.rsplit; the pieces keep taint.
std::vector<Str> Split(const Str& s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<Str> RSplit(const Str& s, const std::optional<std::string>& sep, int64_t maxsplit);

std::string Upper(std::string_view s);
std::string Lower(std::string_view s);
std::string PyTitle(std::string_view s);       // str.title()
std::string PyCapitalize(std::string_view s);  // str.capitalize()
std::string JinjaTitle(
    std::string_view s);  // the `title` filter (word starts after -, space, brackets)

// repr() of a str (quotes and escapes as CPython chooses them).
std::string PyRepr(std::string_view s);
// repr() of a float: shortest round-trip digits, Python's choice of fixed or exponent notation.
std::string FloatRepr(double f);
// markupsafe.escape.
std::string HtmlEscape(std::string_view s);

}  // namespace tpserve::chat
