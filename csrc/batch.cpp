// Persistent thread pool and the batch decode loop: one status per sample, never an exception.
#include "batch.h"
#include "orientation.h"

#include <pthread.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <new>

#include "coeffs.h"
#include "tiles.h"
#include "views.h"

namespace fl {
namespace {

// Pixels of real neighbours the splice keeps around a crop for chroma upsampling
// (tiles.py's UPSAMPLING_CONTEXT); a DCT-scaled decode upsamples in scaled pixels, so the
// context grows with the scale (measured: 1 px differed at 4:2:2 with 1/2 scaling).
constexpr uint32_t kUpsamplingContext = 1;
constexpr uint32_t kScaledContextPerDenominator = 2;


// Every live BatchDecoder, for the fork handlers. Function-local statics: never destroyed, so a
// decoder freed during static destruction at exit still finds them.
std::mutex &registry_mutex() {
    static auto *mutex = new std::mutex();
    return *mutex;
}

std::vector<BatchDecoder *> &registry() {
    static auto *decoders = new std::vector<BatchDecoder *>();
    return *decoders;
}

// The registry lock is held across fork(), so the child never inherits it locked by a thread
// that is not there; the child then resets every decoder while it is the only thread.
void before_fork() { registry_mutex().lock(); }
void after_fork_in_parent() { registry_mutex().unlock(); }
void after_fork_in_child() {
    for (BatchDecoder *decoder : registry()) decoder->reset_after_fork();
    registry_mutex().unlock();  // locked by this very thread in before_fork
}

void register_decoder(BatchDecoder *decoder) {
    static std::once_flag installed;
    std::call_once(installed, [] { pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child); });
    std::lock_guard<std::mutex> lock(registry_mutex());
    registry().push_back(decoder);
}

void unregister_decoder(BatchDecoder *decoder) {
    std::lock_guard<std::mutex> lock(registry_mutex());
    auto &all = registry();
    all.erase(std::remove(all.begin(), all.end(), decoder), all.end());
}

}  // namespace

int tile_geometry(const TileRef *tile, tiles::Geometry &g) {
    if (tile == nullptr || tile->header == nullptr) return 0;
    const int64_t *h = tile->header;
    if (std::all_of(h, h + tiles::kGeometryFields, [](int64_t value) { return value == 0; })) return 0;
    uint32_t *fields[tiles::kGeometryFields] = {&g.width,      &g.height,     &g.sof_offset,
                                                 &g.scan_offset, &g.mcu_width, &g.mcu_height,
                                                 &g.mcus_per_row, &g.mcu_rows,  &g.restart_mcus};
    for (int i = 0; i < tiles::kGeometryFields; ++i) {
        if (h[i] < 0 || h[i] > 0xFFFFFFFFll) return -1;
        *fields[i] = static_cast<uint32_t>(h[i]);
    }
    return 1;
}

uint32_t splice_context(int denom) {
    return denom == 1 ? kUpsamplingContext : kScaledContextPerDenominator * static_cast<uint32_t>(denom);
}

bool covers_image(const CropBox &stored, const tiles::Geometry &geometry) {
    return stored.top == 0 && stored.left == 0 && static_cast<uint32_t>(stored.height) == geometry.height &&
           static_cast<uint32_t>(stored.width) == geometry.width;
}

tiles::Spliced splice_box(const Record &record, const tiles::Geometry &geometry, const TileRef &tile,
                          const CropBox &stored, int denom, std::vector<uint8_t> &buffer, std::string &why) {
    if (buffer.size() < tiles::splice_capacity(record.size)) buffer.resize(tiles::splice_capacity(record.size));
    tiles::Spliced spliced = tiles::splice(record.data, record.size, geometry, tile.offsets, tile.n_offsets,
                                           tiles::Crop{stored.top, stored.left, stored.height, stored.width},
                                           splice_context(denom), buffer.data(), buffer.size());
    if (spliced.status == tiles::Status::kInvalidArgument)
        why = "crop: " + spliced.message;
    else if (spliced.status != tiles::Status::kOk)
        why = "tile table: " + spliced.message;
    return spliced;
}

ThreadPool::ThreadPool(int num_threads) { start_workers(num_threads); }

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::start_workers(int num_threads) {
    num_threads_ = std::max(1, num_threads);
    stopping_ = false;
    idle_workers_ = 0;
    // The calling thread takes slot 0, so n threads need n - 1 workers. A new worker starts
    // from the current generation: starting from 0 would let it join a batch that is already
    // over (after a resize) and check in twice, so run() could return while it still works.
    const uint64_t current = generation_;
    for (int slot = 1; slot < num_threads_; ++slot)
        workers_.emplace_back(&ThreadPool::worker_loop, this, slot, current);
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
    restart_ = false;
    closed_ = false;
    start_workers(num_threads);
}

void ThreadPool::close() {
    std::lock_guard<std::mutex> run_lock(run_mutex_);
    stop_workers();
    restart_ = false;
    closed_ = true;
    num_threads_ = 1;  // a closed pool still works, on the calling thread alone
}

// Only the forking thread exists in the child: the parent's workers are gone, and any lock or
// condition may have been copied mid-use. Placement new gives fresh ones and forgets the
// thread handles without their destructors (a joinable std::thread's destructor aborts, and
// join() on a thread of the parent hangs or fails). No allocation here: fork handlers should
// not allocate. The memory of the forgotten vector is leaked once per fork, by design.
void ThreadPool::reset_after_fork() {
    new (&run_mutex_) std::mutex();
    new (&mutex_) std::mutex();
    new (&wake_) std::condition_variable();
    new (&finished_) std::condition_variable();
    new (&workers_) std::vector<std::thread>();
    task_ = nullptr;
    count_ = 0;
    next_.store(0);
    idle_workers_ = 0;
    stopping_ = false;
    restart_ = !closed_ && num_threads_ > 1;
}

void ThreadPool::restart_if_forked() {
    if (!restart_) return;
    restart_ = false;
    start_workers(num_threads_);
}

void ThreadPool::drain(int slot) {
    for (size_t i = next_.fetch_add(1); i < count_; i = next_.fetch_add(1)) (*task_)(i, slot);
}

void ThreadPool::worker_loop(int slot, uint64_t seen) {
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
    restart_if_forked();
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

BatchDecoder::BatchDecoder(int num_threads) : pool_(num_threads) { register_decoder(this); }

BatchDecoder::~BatchDecoder() { unregister_decoder(this); }

void BatchDecoder::reset_after_fork() {
    new (&mutex_) std::mutex();
    pool_.reset_after_fork();
}

void BatchDecoder::set_num_threads(int num_threads) {
    std::lock_guard<std::mutex> lock(mutex_);
    pool_.resize(num_threads);
}

void BatchDecoder::close() {
    std::lock_guard<std::mutex> lock(mutex_);
    pool_.close();
}

// Sets every pixel of the height x width slot outside the rectangle row (top, left, h, w) to fill.
static void fill_outside(uint8_t *slot, int height, int width, const int32_t *row, uint8_t fill) {
    const size_t stride = static_cast<size_t>(width) * 3;
    const int top = row[0], left = row[1], bottom = row[0] + row[2], right = row[1] + row[3];
    std::memset(slot, fill, stride * top);
    std::memset(slot + stride * bottom, fill, stride * (height - bottom));
    for (int y = top; y < bottom; ++y) {
        std::memset(slot + stride * y, fill, static_cast<size_t>(left) * 3);
        std::memset(slot + stride * y + static_cast<size_t>(right) * 3, fill, static_cast<size_t>(width - right) * 3);
    }
}

void BatchDecoder::decode(const std::vector<Record> &records, const int32_t *crops, const bool *flips,
                          uint8_t *out, int height, int width, const DecodeOptions &options,
                          std::vector<std::string> &errors, std::vector<size_t> &skipped,
                          const TileRef *tiles, const PlanarOutput *planar, const Placement *place,
                          const uint8_t *orientations, const PixelProgramRef *program) {
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t n = records.size();
    const size_t slot_bytes = static_cast<size_t>(height) * width * 3;
    errors.assign(n, std::string());
    std::vector<char> is_jpeg;
    prepare(records, is_jpeg, skipped);
    const std::function<void(size_t, int)> task = [&](size_t k, int slot) {
        if (!is_jpeg[k]) return;
        uint8_t *dst = out + k * slot_bytes;
        const CropBox crop{crops[4 * k], crops[4 * k + 1], crops[4 * k + 2], crops[4 * k + 3]};
        const std::ptrdiff_t stride = static_cast<std::ptrdiff_t>(width) * 3;
        const int orientation = orientations != nullptr ? orientations[k] : 1;
        OutputSlot target{dst, height, width, stride, flips[k], orientation};
        if (place != nullptr && place->rows != nullptr) {  // letterbox: the crop in its rectangle
            const int32_t *row = place->rows + 4 * k;
            fill_outside(dst, height, width, row, place->fill);
            target = OutputSlot{dst + row[0] * stride + static_cast<std::ptrdiff_t>(row[1]) * 3, row[2], row[3],
                                stride, flips[k], orientation};
        }
        try {  // the whole body: nothing may escape a pool task (bad_alloc included)
            errors[k] = decode_one(records[k], crop, target, tiles ? &tiles[k] : nullptr, slot, options);
            if (!errors[k].empty())
                std::memset(dst, 0, slot_bytes);
            else if (program != nullptr)
                program->apply(k, dst, height, width, *pixels_[slot]);
            if (planar != nullptr) write_planar(dst, static_cast<size_t>(height) * width, k, *planar);
        } catch (...) {
            std::memset(dst, 0, slot_bytes);
            // 14 characters fit std::string's inline buffer: this assignment cannot throw.
            errors[k] = "out of memory";
        }
    };
    pool_.run(n, task);
}

void BatchDecoder::prepare(const std::vector<Record> &records, std::vector<char> &is_jpeg,
                           std::vector<size_t> &skipped) {
    const size_t n = records.size();
    is_jpeg.assign(n, 0);
    for (size_t k = 0; k < n; ++k) {
        is_jpeg[k] = looks_like_jpeg(records[k].data, records[k].size) ||
                     coeffs::looks_like_record(records[k].data, records[k].size);
        if (!is_jpeg[k]) skipped.push_back(k);
    }
    while (scratch_.size() < static_cast<size_t>(pool_.num_threads()))
        scratch_.push_back(std::make_unique<DecodeScratch>());
    if (splice_.size() < scratch_.size()) splice_.resize(scratch_.size());
    while (views_.size() < scratch_.size()) views_.push_back(std::make_unique<ViewsScratch>());
    while (pixels_.size() < scratch_.size()) pixels_.push_back(std::make_unique<PixelScratch>());
}

uint64_t BatchDecoder::records_decoded() {
    std::lock_guard<std::mutex> lock(mutex_);  // the per-thread counts are still while no batch runs
    uint64_t total = 0;
    for (const auto &scratch : scratch_) total += scratch->decodes;
    return total;
}

void BatchDecoder::normalize_planar(const uint8_t *src, size_t n, size_t pixels, const PlanarOutput &out) {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::function<void(size_t, int)> task = [&](size_t k, int) {
        planar_u8_to_float(src + k * 3 * pixels, pixels, out.scale, out.shift,
                           static_cast<float *>(out.data) + k * 3 * pixels);  // cannot throw
    };
    pool_.run(n, task);
}

// A tiled record with a real crop is decoded from a JPEG spliced from only the restart segments
// the crop needs (crop translated to the splice's origin); everything else from the record.
// The crop is a box of the image as the target's orientation shows it: mapped to the stored
// pixels for the splice, and back to the spliced image's turned view for its decode.
std::string BatchDecoder::decode_one(const Record &record, const CropBox &asked, const OutputSlot &target,
                                     const TileRef *tile, int slot, const DecodeOptions &options) {
    DecodeScratch &scratch = *scratch_[slot];
    ++scratch.decodes;  // one read and entropy decode of the record, whichever codec runs it
    if (coeffs::looks_like_record(record.data, record.size))
        return coeffs::decode_into(record.data, record.size, asked, target, scratch.resizer, options);
    const bool whole = asked.height == 0 && asked.width == 0;
    tiles::Geometry geometry;
    const int tiled = whole ? 0 : tile_geometry(tile, geometry);
    if (tiled == 0) return decode_jpeg_into(record.data, record.size, asked, target, scratch, options);
    if (tiled < 0) return "tile table: header values out of range (damaged index)";
    const int orientation = target.orientation;
    const CropBox crop = stored_crop(asked, static_cast<int>(geometry.height), static_cast<int>(geometry.width),
                                     orientation);
    if (covers_image(crop, geometry))
        return decode_jpeg_into(record.data, record.size, asked, target, scratch, options);
    std::vector<uint8_t> &buffer = splice_[slot];
    std::string why;
    const tiles::Spliced spliced =
        splice_box(record, geometry, *tile, crop, dct_denominator(crop, target, options), buffer, why);
    if (!why.empty()) return why;
    const CropBox local{crop.top - static_cast<int>(spliced.y0), crop.left - static_cast<int>(spliced.x0),
                        crop.height, crop.width};
    const CropBox turned = oriented_crop(local, static_cast<int>(spliced.height), static_cast<int>(spliced.width),
                                         orientation);
    return decode_jpeg_into(buffer.data(), spliced.size, turned, target, scratch, options);
}

}  // namespace fl
