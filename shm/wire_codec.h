// The wire codec's building blocks, shared by shm/protocol.cc and shm/protocol_admin.cc (internal to shm): a Writer
// that appends little-endian fields and patches the payload size, a SizedWriter for messages of known size (the hit
// path), a Reader whose errors name the message and the field, and PlainLayout, the one table from which both the
// encoder and the decoder of a message made only of fixed-width fields are written.
#pragma once

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <tuple>

#include "codec/common/bytes.h"
#include "shm/protocol.h"

namespace epk::shm::wire {


// Appends little-endian fields to a message; finish() patches the payload size into the header.
class Writer {
 public:
  Writer(std::vector<std::uint8_t>* out, std::uint32_t id, std::uint16_t type) : out_(out) {
    out_->assign(kHeaderSize, 0);
    FrameHeader h;
    h.type = type;
    h.request_id = id;
    encode_header(h, out_->data());
  }
  // Appended as bytes: a resize would value-initialise (memset) each field before storing it, and the encoders
  // run on every request and reply.
  template <class T>
  void put(T v) {
    std::uint8_t b[sizeof(T)];
    store_le<T>(b, v);
    out_->insert(out_->end(), b, b + sizeof(T));
  }
  void put_str(std::string_view s, std::size_t limit) {
    s = s.substr(0, std::min(s.size(), limit));
    put<std::uint16_t>(static_cast<std::uint16_t>(s.size()));
    out_->insert(out_->end(), s.begin(), s.end());
  }
  ~Writer() { store_le<std::uint32_t>(out_->data() + 12, static_cast<std::uint32_t>(out_->size() - kHeaderSize)); }

 private:
  std::vector<std::uint8_t>* out_;
};

// The hit path's messages (acquire, release, acquire reply) have a size known before encoding: the message is sized
// once and its fields stored in place, with no per-field growth of the vector. Same bytes as Writer would give.
class SizedWriter {
 public:
  SizedWriter(std::vector<std::uint8_t>* out, std::uint32_t id, std::uint16_t type, std::size_t payload) {
    out->resize(kHeaderSize + payload);
    FrameHeader h;
    h.type = type;
    h.request_id = id;
    h.payload_size = static_cast<std::uint32_t>(payload);
    encode_header(h, out->data());
    at_ = out->data() + kHeaderSize;
  }
  template <class T>
  void put(T v) {
    store_le<T>(at_, v);
    at_ += sizeof(T);
  }
  void put_bytes(const void* p, std::size_t n) {
    if (n != 0) std::memcpy(at_, p, n);
    at_ += n;
  }

 private:
  std::uint8_t* at_;
};

// Reads fields from an untrusted payload; every read is checked against the bytes left, and errors name the message
// and the field.
class Reader {
 public:
  Reader(std::span<const std::uint8_t> p, const char* msg) : p_(p), msg_(msg) {}

  template <class T>
  Result<T> get(const char* field) {
    if (p_.size() - pos_ < sizeof(T)) return short_error(field, sizeof(T));
    T v = load_le<T>(p_.data() + pos_);
    pos_ += sizeof(T);
    return v;
  }
  Result<std::string> get_str(const char* field, std::size_t limit) {
    EPK_TRY_ASSIGN(std::uint16_t n, get<std::uint16_t>(field));
    if (n > limit) {
      return make_error(ErrorCode::kBadInput, std::string(msg_) + ": field '" + field + "' length " +
                                                  std::to_string(n) + " exceeds the limit " + std::to_string(limit));
    }
    if (p_.size() - pos_ < n) return short_error(field, n);
    std::string s(reinterpret_cast<const char*>(p_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  // Into an existing string: no allocation while n fits its capacity.
  Status get_str_into(const char* field, std::size_t limit, std::string* out) {
    EPK_TRY_ASSIGN(std::uint16_t n, get<std::uint16_t>(field));
    if (n > limit) {
      return make_error(ErrorCode::kBadInput, std::string(msg_) + ": field '" + field + "' length " +
                                                  std::to_string(n) + " exceeds the limit " + std::to_string(limit));
    }
    if (p_.size() - pos_ < n) return short_error(field, n);
    out->assign(reinterpret_cast<const char*>(p_.data() + pos_), n);
    pos_ += n;
    return {};
  }
  template <class T>
  Status get_into(const char* field, T* out) {
    EPK_TRY_ASSIGN(*out, get<T>(field));
    return {};
  }
  std::size_t left() const { return p_.size() - pos_; }
  Status finish() const {
    if (pos_ != p_.size()) {
      return make_error(ErrorCode::kBadInput, std::string(msg_) + ": " + std::to_string(p_.size() - pos_) +
                                                  " trailing bytes after the last field");
    }
    return {};
  }
  Error bad(const char* field, const std::string& why) const {
    return make_error(ErrorCode::kBadInput, std::string(msg_) + ": field '" + field + "' " + why);
  }

 private:
  Error short_error(const char* field, std::size_t need) const {
    return make_error(ErrorCode::kBadInput, std::string(msg_) + ": field '" + field + "' needs " +
                                                std::to_string(need) + " bytes, " + std::to_string(p_.size() - pos_) +
                                                " left");
  }

  std::span<const std::uint8_t> p_;
  std::size_t pos_ = 0;
  const char* msg_;
};

inline std::uint16_t reply(MsgType t) { return static_cast<std::uint16_t>(static_cast<std::uint16_t>(t) | kReplyBit); }

// A fixed-width integer field of message M: its name in errors and the member that holds it.
template <class M, class T>
struct Field {
  const char* name;
  T M::*member;
};
template <class M, class T>
Field(const char*, T M::*) -> Field<M, T>;

// A message whose payload is its fields in this order, each little-endian, with nothing to check beyond their size
// and no bytes after them.
template <class M, class... T>
struct PlainLayout {
  const char* what;  // the message's name in errors
  std::tuple<Field<M, T>...> fields;
};
template <class M, class... T>
constexpr PlainLayout<M, T...> plain_layout(const char* what, Field<M, T>... fields) {
  return {what, {fields...}};
}

template <class M, class... T>
void encode_plain(std::uint32_t id, std::uint16_t type, const M& m, const PlainLayout<M, T...>& layout,
                  std::vector<std::uint8_t>* out) {
  Writer w(out, id, type);
  std::apply([&](const auto&... f) { (w.put(m.*f.member), ...); }, layout.fields);
}

// Reads the fields in order; the first one the payload is too short for is the error, then trailing bytes are.
template <class M, class... T>
Result<M> decode_plain(std::span<const std::uint8_t> p, const PlainLayout<M, T...>& layout) {
  Reader r(p, layout.what);
  M m;
  Status st;
  std::apply([&](const auto&... f) { (void)((st = r.get_into(f.name, &(m.*f.member))) && ...); }, layout.fields);
  EPK_TRY(st);
  EPK_TRY(r.finish());
  return m;
}

// The count of a listing reply (models, tensors) that announced `total`: at most total, and no more entries of at
// least min_entry bytes each than the bytes left can hold (a count is checked before anything is reserved for it).
inline Result<std::uint32_t> get_list_count(Reader& r, std::uint32_t total, std::size_t min_entry) {
  EPK_TRY_ASSIGN(std::uint32_t count, r.get<std::uint32_t>("count"));
  if (count > total || count > r.left() / min_entry) {
    return r.bad("count", std::to_string(count) + " exceeds the total or the bytes left");
  }
  return count;
}

// Writes a listing reply's total and count, then as many entries as fit in kMaxPayload (at least none), each of
// entry_bytes(entry) bytes written by put_entry(entry); the count written is the number of entries written.
template <class E, class EntryBytes, class PutEntry>
void put_list(Writer& w, std::vector<std::uint8_t>* out, std::uint32_t total, const std::vector<E>& entries,
              EntryBytes entry_bytes, PutEntry put_entry) {
  w.put<std::uint32_t>(total);
  const std::size_t count_at = out->size();
  w.put<std::uint32_t>(0);
  std::uint32_t count = 0;
  for (const E& e : entries) {
    if (out->size() - kHeaderSize + entry_bytes(e) > kMaxPayload) break;
    put_entry(e);
    ++count;
  }
  store_le<std::uint32_t>(out->data() + count_at, count);
}

}  // namespace epk::shm::wire
