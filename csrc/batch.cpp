// Persistent thread pool and the batch decode loop: one status per sample, never an exception.
#include "batch.h"

#include <algorithm>
#include <cstring>
#include <exception>

namespace fl {

ThreadPool::ThreadPool(int num_threads) { start_workers(num_threads); }

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::start_workers(int num_threads) {
    num_threads_ = std::max(1, num_threads);
    stopping_ = false;
    idle_workers_ = 0;
    // The calling thread takes slot 0, so n threads need n - 1 workers.
    for (int slot = 1; slot < num_threads_; ++slot) workers_.emplace_back(&ThreadPool::worker_loop, this, slot);
}

void ThreadPool::stop_workers() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    for (auto &t : workers_) t.join();
    workers_.clear();
}

void ThreadPool::resize(int num_threads) {
    std::lock_guard<std::mutex> run_lock(run_mutex_);
    stop_workers();
    start_workers(num_threads);
}

void ThreadPool::close() {
    std::lock_guard<std::mutex> run_lock(run_mutex_);
    stop_workers();
    num_threads_ = 1;  // a closed pool still works, on the calling thread alone
}

void ThreadPool::drain(int slot) {
    for (size_t i = next_.fetch_add(1); i < count_; i = next_.fetch_add(1)) (*task_)(i, slot);
}

void ThreadPool::worker_loop(int slot) {
    uint64_t seen = 0;
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(mutex_);
            wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
            if (stopping_) return;
            seen = generation_;
        }
        drain(slot);
        {
            std::lock_guard<std::mutex> lock(mutex_);
            ++idle_workers_;
        }
        finished_.notify_one();
    }
}

void ThreadPool::run(size_t count, const std::function<void(size_t, int)> &task) {
    std::lock_guard<std::mutex> run_lock(run_mutex_);
    const int workers = static_cast<int>(workers_.size());
    if (workers == 0 || count < 2) {
        for (size_t i = 0; i < count; ++i) task(i, 0);
        return;
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        task_ = &task;
        count_ = count;
        next_.store(0);
        idle_workers_ = 0;
        ++generation_;
    }
    wake_.notify_all();
    drain(0);
    // Every worker must check in, so none still holds task_ when this returns.
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [&] { return idle_workers_ == workers; });
    task_ = nullptr;
}

BatchDecoder::BatchDecoder(int num_threads) : pool_(num_threads) {}

void BatchDecoder::set_num_threads(int num_threads) {
    std::lock_guard<std::mutex> lock(mutex_);
    pool_.resize(num_threads);
}

void BatchDecoder::close() {
    std::lock_guard<std::mutex> lock(mutex_);
    pool_.close();
}

void BatchDecoder::decode(const std::vector<Record> &records, const int32_t *crops, const bool *flips,
                          uint8_t *out, int height, int width, const DecodeOptions &options,
                          std::vector<std::string> &errors, std::vector<size_t> &skipped) {
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t n = records.size();
    const size_t slot_bytes = static_cast<size_t>(height) * width * 3;
    errors.assign(n, std::string());
    std::vector<char> is_jpeg(n);
    for (size_t k = 0; k < n; ++k) {
        is_jpeg[k] = looks_like_jpeg(records[k].data, records[k].size);
        if (!is_jpeg[k]) skipped.push_back(k);
    }
    while (scratch_.size() < static_cast<size_t>(pool_.num_threads()))
        scratch_.push_back(std::make_unique<DecodeScratch>());
    const std::function<void(size_t, int)> task = [&](size_t k, int slot) {
        if (!is_jpeg[k]) return;
        uint8_t *dst = out + k * slot_bytes;
        const CropBox crop{crops[4 * k], crops[4 * k + 1], crops[4 * k + 2], crops[4 * k + 3]};
        const OutputSlot target{dst, height, width, static_cast<std::ptrdiff_t>(width) * 3, flips[k]};
        try {
            errors[k] = decode_jpeg_into(records[k].data, records[k].size, crop, target, *scratch_[slot], options);
        } catch (const std::exception &exc) {  // bad_alloc: report, never cross threads
            errors[k] = std::string("decode failed: ") + exc.what();
        }
        if (!errors[k].empty()) std::memset(dst, 0, slot_bytes);
    };
    pool_.run(n, task);
}

}  // namespace fl
