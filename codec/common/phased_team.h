// A fixed team of host threads for work done in phases: in each phase every member runs its share of the phase's
// work, and once all of them have, one member runs the step between phases before any member starts the next.
// The staged device copies (codec/cuda/encode/encode_copy.h) use it: each phase copies one chunk through a pinned slot and
// the step between orders the chunk's DMA. The threads are started once, with the team, because starting threads
// for each chunk costs about as much as copying the chunk (docs/measurements/gpu-encoder.md).
// One run at a time: run() is not reentrant and the team is not shared between threads that call run().
#pragma once

#include <barrier>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace epk {

class PhasedTeam {
 public:
  // members >= 1: the caller of run() and members - 1 threads started here (std::system_error when they cannot
  // be).
  explicit PhasedTeam(int members);
  PhasedTeam(const PhasedTeam&) = delete;
  PhasedTeam& operator=(const PhasedTeam&) = delete;
  ~PhasedTeam();

  int members() const { return members_; }

  // For each phase p in [0, phases): share(p, m) on every member m in [0, members()) concurrently, then between(p)
  // on one of them. between returns false to stop: the later phases' shares are skipped (the members still pass
  // through them) and run returns false. before() runs on every started thread when it takes the run, before its
  // first share (where a thread-local setting, such as the CUDA device, must match the caller's).
  bool run(std::size_t phases, const std::function<void(std::size_t phase, int member)>& share,
           const std::function<bool(std::size_t phase)>& between, const std::function<void()>& before = {});

 private:
  struct PhaseEnd {
    PhasedTeam* team;
    void operator()() noexcept;
  };
  struct Job {
    std::size_t phases = 0;
    const std::function<void(std::size_t, int)>* share = nullptr;
    const std::function<bool(std::size_t)>* between = nullptr;
    const std::function<void()>* before = nullptr;
  };
  void work(int member);
  void stop();
  void phases(const Job& job, int member);

  const int members_;
  std::barrier<PhaseEnd> barrier_;
  std::mutex mu_;
  std::condition_variable start_;
  Job job_;                      // the current run's, written under mu_ before generation_ moves
  std::size_t generation_ = 0;   // runs started
  bool stopping_ = false;
  // Written by the member that completes a phase, read by all after it: the barrier orders both.
  std::size_t phase_ = 0;
  bool stopped_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace epk
