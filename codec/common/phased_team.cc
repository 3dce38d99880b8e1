#include "codec/common/phased_team.h"

namespace epk {

PhasedTeam::PhasedTeam(int members) : members_(members < 1 ? 1 : members), barrier_(members_, PhaseEnd{this}) {
  try {
    threads_.reserve(std::size_t(members_ - 1));
    for (int m = 1; m < members_; ++m) threads_.emplace_back([this, m] { work(m); });
  } catch (...) {
    stop();  // the threads already started, before the error goes to the caller
    throw;
  }
}

void PhasedTeam::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  start_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

PhasedTeam::~PhasedTeam() { stop(); }

void PhasedTeam::PhaseEnd::operator()() noexcept {
  PhasedTeam& t = *team;
  if (!t.stopped_ && !(*t.job_.between)(t.phase_)) t.stopped_ = true;
  ++t.phase_;
}

void PhasedTeam::phases(const Job& job, int member) {
  for (std::size_t p = 0; p < job.phases; ++p) {
    if (!stopped_) (*job.share)(p, member);
    barrier_.arrive_and_wait();
  }
}

void PhasedTeam::work(int member) {
  std::size_t seen = 0;
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      job = job_;
    }
    if (job.before && *job.before) (*job.before)();
    phases(job, member);
  }
}

bool PhasedTeam::run(std::size_t phases_count, const std::function<void(std::size_t, int)>& share,
                     const std::function<bool(std::size_t)>& between, const std::function<void()>& before) {
  if (phases_count == 0) return true;
  Job job{phases_count, &share, &between, &before};
  // The previous run's members have all passed its last barrier (its run() returned after it), so phase_ and
  // stopped_ are only read again after this run's start.
  phase_ = 0;
  stopped_ = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = job;
    ++generation_;
  }
  start_.notify_all();
  phases(job, 0);
  return !stopped_;
}

}  // namespace epk
