#include "codec/container/format.h"

namespace epk::container {

std::string_view encoding_name(Encoding e) {
  switch (e) {
    case Encoding::kRaw:
      return "raw";
    case Encoding::kLatticeRans:
      return "lattice-rans";
    case Encoding::kIntq:
      return "intq";
  }
  return "unknown";
}

std::optional<Encoding> encoding_from_name(std::string_view name) {
  for (int i = 0; i < kEncodingCount; ++i) {
    auto e = static_cast<Encoding>(i);
    if (encoding_name(e) == name) return e;
  }
  return std::nullopt;
}

std::optional<Encoding> encoding_from_code(std::uint32_t code) {
  if (code >= static_cast<std::uint32_t>(kEncodingCount)) return std::nullopt;
  return static_cast<Encoding>(code);
}

bool is_valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len;
    std::uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (n - i < len) return false;
    for (std::size_t k = 1; k < len; ++k) {
      unsigned cc = p[i + k];
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr std::uint32_t kMinForLen[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMinForLen[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

bool is_valid_name_utf8(std::string_view s) { return s.find('\0') == std::string_view::npos && is_valid_utf8(s); }

}  // namespace epk::container
