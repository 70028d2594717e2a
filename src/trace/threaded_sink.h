// A SampleSink that runs another on a thread of its own (`headroom analyze --threads 2`): the
// reader parses and validates on the caller's thread while the inner sink (the Analyzer) takes
// the batches before, in file order, on a second core. Each batch goes into one of `depth`
// slots: taken whole (TakeBatch: its columns swapped for the slot's, no copy) or copied
// (OnBatch); the slots are reused, so memory stays bounded by `depth` batches and nothing is
// allocated per batch once they have grown. The reader waits while every slot is full, the
// sink's thread while none is (each side woken only when the other waits). The schema handed with
// each batch is the reader's as of that batch (copied only when it has grown: GPU ids and phases
// are only ever added).
//
// Thread-safety: OnBatch and Finish from one thread (the reader's); the inner sink is called
// from the sink's own thread until Finish returns, and belongs to the caller again after.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <memory>
#include <thread>
#include <vector>

#include "common/thread_annotations.h"
#include "trace/reader.h"

namespace headroom::trace {

class ThreadedSink final : public SampleSink {
 public:
  // REQUIRES: depth >= 1.
  explicit ThreadedSink(SampleSink& inner, size_t depth = 8);
  ~ThreadedSink() override;  // Finish()
  ThreadedSink(const ThreadedSink&) = delete;
  ThreadedSink& operator=(const ThreadedSink&) = delete;

  void OnBatch(const SampleBatch& batch, const TraceSchema& schema) override;
  void TakeBatch(SampleBatch& batch, const TraceSchema& schema) override;
  // Returns once the inner sink has taken every batch handed so far; stops the thread.
  // Idempotent.
  void Finish();

 private:
  struct Slot {
    SampleBatch batch;
    std::shared_ptr<const TraceSchema> schema;
  };
  void Run();
  // The next free slot (waiting for one), and handing it over once filled.
  size_t FreeSlot(const TraceSchema& schema);
  void Filled();

  SampleSink& inner_;
  // A ring of slots: [head_, head_ + count_) are filled and the sink's thread's to take; the next
  // one after them is the reader's to fill. Each slot is touched outside the lock only by the
  // side that owns it then; the lock hands it over.
  std::vector<Slot> slots_;
  Mutex mu_;
  std::condition_variable_any cv_;
  size_t head_ GUARDED_BY(mu_) = 0;
  size_t count_ GUARDED_BY(mu_) = 0;
  bool done_ GUARDED_BY(mu_) = false;
  bool reader_waits_ GUARDED_BY(mu_) = false;
  bool sink_waits_ GUARDED_BY(mu_) = false;
  std::shared_ptr<const TraceSchema> schema_;  // the reader's thread's: the latest snapshot
  std::thread thread_;
};

}  // namespace headroom::trace
