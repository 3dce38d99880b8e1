// A callback run every `period` on an io_context's thread until stop(); stop() also cancels the wait in progress, so
// the context can run out of work (epkd's drain ends when nothing is left on its main context).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <utility>

namespace epk::daemon {

class Periodic {
 public:
  Periodic(boost::asio::io_context& io, std::chrono::steady_clock::duration period, std::function<void()> fn)
      : timer_(io), period_(period), fn_(std::move(fn)) {}
  Periodic(const Periodic&) = delete;
  Periodic& operator=(const Periodic&) = delete;

  void start() {
    running_ = true;
    arm();
  }
  void stop() {
    running_ = false;
    timer_.cancel();
  }

 private:
  void arm() {
    timer_.expires_after(period_);
    timer_.async_wait([this](boost::system::error_code ec) {
      if (ec || !running_) return;
      fn_();
      arm();
    });
  }

  boost::asio::steady_timer timer_;
  std::chrono::steady_clock::duration period_;
  std::function<void()> fn_;
  bool running_ = false;  // touched on the io_context's thread only
};

}  // namespace epk::daemon
