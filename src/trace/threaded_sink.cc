#include "trace/threaded_sink.h"

#include <cassert>
#include <utility>

namespace headroom::trace {
namespace {

// to <- from's entries [0, count): the columns from has.
template <class T>
void CopyColumn(const std::vector<T>& from, size_t count, std::vector<T>& to) {
  if (from.empty()) {
    to.clear();
    return;
  }
  to.assign(from.begin(), from.begin() + static_cast<std::ptrdiff_t>(count));
}

void CopyBatch(const SampleBatch& from, SampleBatch& to) {
  const size_t n = from.count;
  CopyColumn(from.gpu, n, to.gpu);
  CopyColumn(from.t_s, n, to.t_s);
  CopyColumn(from.power_w, n, to.power_w);
  for (size_t f = 0; f < from.fields.size(); ++f) CopyColumn(from.fields[f], n, to.fields[f]);
  CopyColumn(from.phase, n, to.phase);
  to.count = n;
}

bool SameSchema(const TraceSchema& a, const TraceSchema& b) {
  return a.format == b.format && a.has_field == b.has_field && a.has_phase == b.has_phase &&
         a.gpu_ids.size() == b.gpu_ids.size() && a.phase_names.size() == b.phase_names.size();
}

}  // namespace

ThreadedSink::ThreadedSink(SampleSink& inner, size_t depth) : inner_(inner), slots_(depth) {
  assert(depth >= 1);
  thread_ = std::thread([this] { Run(); });
}

ThreadedSink::~ThreadedSink() { Finish(); }

size_t ThreadedSink::FreeSlot(const TraceSchema& schema) {
  if (!schema_ || !SameSchema(*schema_, schema)) {
    schema_ = std::make_shared<const TraceSchema>(schema);
  }
  MutexLock lock(mu_);
  reader_waits_ = true;
  Wait(cv_, mu_, [&]() REQUIRES(mu_) { return count_ < slots_.size(); });
  reader_waits_ = false;
  return (head_ + count_) % slots_.size();
}

void ThreadedSink::Filled() {
  bool wake = false;
  {
    MutexLock lock(mu_);
    ++count_;
    wake = sink_waits_;
  }
  if (wake) cv_.notify_all();
}

void ThreadedSink::OnBatch(const SampleBatch& batch, const TraceSchema& schema) {
  Slot& slot = slots_[FreeSlot(schema)];  // mine until Filled
  CopyBatch(batch, slot.batch);
  slot.schema = schema_;
  Filled();
}

void ThreadedSink::TakeBatch(SampleBatch& batch, const TraceSchema& schema) {
  Slot& slot = slots_[FreeSlot(schema)];  // mine until Filled
  // The columns the reader gets back must be the shape of the ones it gave.
  bool same_shape = slot.batch.gpu.size() == batch.gpu.size() &&
                    slot.batch.t_s.size() == batch.t_s.size() &&
                    slot.batch.power_w.size() == batch.power_w.size() &&
                    slot.batch.phase.size() == batch.phase.size();
  for (size_t f = 0; f < batch.fields.size(); ++f) {
    same_shape = same_shape && slot.batch.fields[f].size() == batch.fields[f].size();
  }
  if (!same_shape) {
    SampleBatch fresh;
    fresh.gpu.resize(batch.gpu.size());
    fresh.t_s.resize(batch.t_s.size());
    fresh.power_w.resize(batch.power_w.size());
    for (size_t f = 0; f < batch.fields.size(); ++f) fresh.fields[f].resize(batch.fields[f].size());
    fresh.phase.assign(batch.phase.size(), SampleBatch::kNoPhase);
    slot.batch = std::move(fresh);
  }
  std::swap(slot.batch, batch);
  batch.count = 0;
  slot.schema = schema_;
  Filled();
}

void ThreadedSink::Run() {
  while (true) {
    size_t head = 0;
    {
      MutexLock lock(mu_);
      sink_waits_ = true;
      Wait(cv_, mu_, [&]() REQUIRES(mu_) { return count_ > 0 || done_; });
      sink_waits_ = false;
      if (count_ == 0) return;  // done, and nothing left
      head = head_;
    }
    Slot& slot = slots_[head];  // the sink's until head_ moves past it
    inner_.OnBatch(slot.batch, *slot.schema);
    bool wake = false;
    {
      MutexLock lock(mu_);
      head_ = (head_ + 1) % slots_.size();
      --count_;
      wake = reader_waits_;
    }
    if (wake) cv_.notify_all();
  }
}

void ThreadedSink::Finish() {
  {
    MutexLock lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace headroom::trace
