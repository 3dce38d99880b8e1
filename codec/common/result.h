// Error values for epk: OS failures, bad input and CUDA failures travel as Result<T> up to a module edge, where they
// are logged or printed. No exceptions cross module edges or the C ABI.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace epk {

enum class ErrorCode : std::uint8_t {
  kIo,            // an OS call failed (open, read, mmap, rename, ...)
  kBadInput,      // a file or message is malformed: the message names the file and the field
  kChecksum,      // stored and computed checksums differ
  kUnsupported,   // well-formed, but a version, dtype or encoding this build does not handle
  kCorruptTile,   // an entropy-coded tile did not decode to its initial states
  kInvalidArgument,
  kNotFound,
  kCuda,
  kInternal,
  kNoSpace,  // a request cannot fit in a byte budget (the daemon's cache) without breaking a rule
  kPermission,  // the peer's credentials do not allow it (epkd's access rules)
  kQuota,       // within the budget, but over the client's own quota
};

const char* error_code_name(ErrorCode code);

struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;

  // "bad-input: model.epk: tensor 'w': buffer 2 offset 812 past end of file (size 800)"
  std::string to_string() const;
};

Error make_error(ErrorCode code, std::string message);
// An kIo error carrying strerror(errno_value) after the message.
Error make_errno_error(std::string message, int errno_value);

// A minimal std::expected stand-in (C++20 has none): either a value or an Error.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::in_place_index<1>, std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool has_value() const { return v_.index() == 0; }
  explicit operator bool() const { return has_value(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const& { return std::get<1>(v_); }
  Error&& error() && { return std::get<1>(std::move(v_)); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT(google-explicit-constructor)

  bool has_value() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const& { return error_; }
  Error&& error() && { return std::move(error_); }

 private:
  Error error_;
  bool ok_ = true;
};

using Status = Result<void>;

}  // namespace epk

// EPK_TRY(expr): evaluate a Result<void>-like expression and return its error from the enclosing function.
#define EPK_TRY(expr)                              \
  do {                                             \
    auto epk_try_result_ = (expr);                 \
    if (!epk_try_result_) return std::move(epk_try_result_).error(); \
  } while (0)

// EPK_TRY_ASSIGN(lhs, expr): lhs = value of a Result<T>, or return its error.
#define EPK_CONCAT_INNER_(a, b) a##b
#define EPK_CONCAT_(a, b) EPK_CONCAT_INNER_(a, b)
#define EPK_TRY_ASSIGN(lhs, expr) EPK_TRY_ASSIGN_IMPL_(EPK_CONCAT_(epk_try_, __LINE__), lhs, expr)
#define EPK_TRY_ASSIGN_IMPL_(tmp, lhs, expr)      \
  auto tmp = (expr);                              \
  if (!tmp) return std::move(tmp).error();        \
  lhs = std::move(tmp).value()
