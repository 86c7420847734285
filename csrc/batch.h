// Decodes a batch of JPEG records into one NHWC uint8 buffer over a persistent thread pool.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <sys/types.h>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "jpeg.h"
#include "normalize.h"
#include "pixel_ops.h"
#include "tiles.h"

namespace fl {

struct ViewsScratch;  // views.h

// Fixed set of worker threads; run() spreads indices over the workers and the calling thread.
//
// Lifetime: the destructor joins the workers. A forked child inherits the pool's memory but not
// its threads (only the forking thread exists there), and a mutex may have been copied locked:
// a pthread_atfork child handler gives every pool fresh locks and forgets the parent's thread
// handles (never joined: joining a thread that does not exist hangs or fails), and the next
// run() or resize() starts new workers in the child.
class ThreadPool {
public:
    explicit ThreadPool(int num_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool &) = delete;
    ThreadPool &operator=(const ThreadPool &) = delete;

    int num_threads() const { return num_threads_; }
    void resize(int num_threads);  // waits for a running batch first
    void close();
    // In a forked child, called by the atfork handler while only one thread exists.
    void reset_after_fork();
    // Calls task(index, thread_slot) for every index in [0, count); thread_slot < num_threads().
    void run(size_t count, const std::function<void(size_t, int)> &task);

private:
    void start_workers(int num_threads);
    void stop_workers();
    void restart_if_forked();  // under run_mutex_
    void worker_loop(int slot, uint64_t seen);
    void drain(int slot);

    std::mutex run_mutex_;  // one batch at a time per pool
    std::mutex mutex_;
    std::condition_variable wake_;
    std::condition_variable finished_;
    std::vector<std::thread> workers_;
    const std::function<void(size_t, int)> *task_ = nullptr;
    size_t count_ = 0;
    std::atomic<size_t> next_{0};
    uint64_t generation_ = 0;
    int idle_workers_ = 0;
    bool stopping_ = false;
    bool restart_ = false;  // set in a forked child: start workers before the next batch
    bool closed_ = false;
    int num_threads_ = 1;
};

struct Record {
    const uint8_t *data = nullptr;
    size_t size = 0;
};

// One sample's restart-tile table (see tiles.h): header == nullptr or an all-zero header
// means the record is not tiled. The pointers stay valid for the whole decode() call.
struct TileRef {
    const int64_t *header = nullptr;  // 9 values in tiles::Geometry order
    const uint32_t *offsets = nullptr;
    size_t n_offsets = 0;
};

// A record's restart-tile table as a Geometry: 1 when it is tiled, 0 when not (no table, or an
// all-zero header), -1 when a header value cannot come from a real table (a damaged index).
int tile_geometry(const TileRef *tile, tiles::Geometry &geometry);

// Pixels of real neighbours a splice keeps around a crop decoded at 1/denom, for chroma
// upsampling (tiles.py's UPSAMPLING_CONTEXT at full scale; it grows with the scale).
uint32_t splice_context(int denom);

// Whether the stored box is the whole image (a tiled record is then decoded as it is, unspliced).
bool covers_image(const CropBox &stored, const tiles::Geometry &geometry);

// The segments of a tiled record the stored box needs, spliced into buffer (grown as needed)
// with the upsampling context of a decode at 1/denom. why: "" or what went wrong ("crop: ..."
// for a box the table cannot serve, "tile table: ..." for a damaged table).
tiles::Spliced splice_box(const Record &record, const tiles::Geometry &geometry, const TileRef &tile,
                          const CropBox &stored, int denom, std::vector<uint8_t> &buffer, std::string &why);

// A batch's PixelProgram (pixel_ops.h): sample k's n_ops steps at codes + k * n_ops and params +
// k * n_ops * kPixelParams. codes == nullptr or n_ops == 0: no pixel ops.
struct PixelProgramRef {
    const int32_t *codes = nullptr;
    const float *params = nullptr;
    int n_ops = 0;
    bool empty() const { return codes == nullptr || n_ops == 0; }
    // Runs sample k's steps on its decoded slot (height x width RGB, rows packed).
    void apply(size_t k, uint8_t *slot, int height, int width, PixelScratch &scratch) const {
        if (empty()) return;
        const size_t at = k * static_cast<size_t>(n_ops);
        apply_pixel_program(slot, height, width, codes + at, params + at * kPixelParams, n_ops, scratch);
    }
};

// A batch of views (decode_views): V outputs, each N x heights[v] x widths[v] x 3 at outs[v],
// with its pixel program (programs[v], run on each decoded sample before the planar copy) and
// its planar output (planars[v], data nullptr: none). crops (N x V x 4) and flips (N x V)
// are sample-major: view v of sample k at k * V + v.
struct ViewOutputs {
    int count = 0;
    const int32_t *crops = nullptr;
    const bool *flips = nullptr;
    std::vector<uint8_t *> outs;
    std::vector<int> heights, widths;
    std::vector<PixelProgramRef> programs;
    std::vector<PlanarOutput> planars;
};

// Where each sample's resized crop sits in its slot (a letterbox): rows[4k..4k+3] = top, left,
// height, width inside the H x W slot, the rest of the slot set to fill. rows == nullptr: every
// crop fills its whole slot. The bindings check every row lies inside the slot.
struct Placement {
    const int32_t *rows = nullptr;
    uint8_t fill = 0;
};

// One batch decoder: a pool plus per-thread scratch buffers.
class BatchDecoder {
public:
    explicit BatchDecoder(int num_threads);
    ~BatchDecoder();
    BatchDecoder(const BatchDecoder &) = delete;
    BatchDecoder &operator=(const BatchDecoder &) = delete;
    int num_threads() const { return pool_.num_threads(); }
    void set_num_threads(int num_threads);
    void close();
    // In a forked child, called by the atfork handler while only one thread exists.
    void reset_after_fork();

    // Decodes records[k] (crops[4k..4k+3] = top, left, height, width; flips[k]) into
    // out + k * H * W * 3. errors[k] is "" on success; failed slots are zero-filled.
    // Records that are not JPEG are left untouched and listed in skipped (for Pillow).
    // tiles (nullptr: none tiled) gives each record's restart-tile table: a tiled record with
    // a crop is decoded from a JPEG spliced from only the segments the crop needs.
    // planar (nullptr or no data: none) also gets each decoded sample as CHW planes, converted
    // by the same thread right after its resize (skipped records are left to the caller).
    // place (nullptr or no rows: none) puts each resized crop in a sub-rectangle of its slot
    // and fills the rest (skipped records are left to the caller, fill included).
    // orientations (nullptr: all 1) gives each record's EXIF orientation: its crop is a box of
    // the image so turned, and the slot receives it turned (orientation.h).
    // program (nullptr or empty: none) runs each decoded sample's pixel ops on its whole slot in
    // the decoding thread, before the planar copy (a failed sample stays zero).
    void decode(const std::vector<Record> &records, const int32_t *crops, const bool *flips,
                uint8_t *out, int height, int width, const DecodeOptions &options,
                std::vector<std::string> &errors, std::vector<size_t> &skipped,
                const TileRef *tiles = nullptr, const PlanarOutput *planar = nullptr,
                const Placement *place = nullptr, const uint8_t *orientations = nullptr,
                const PixelProgramRef *program = nullptr);

    // Decodes each record once and writes every view of it from that decode (views.h): view v
    // of sample k is crops[k * V + v] resized into outs[v]'s slot k, mirrored if flips[k * V + v],
    // given programs[v]'s ops, then made planar, each view in turn while it is in cache. errors[k] is "" on success; a failed sample is zero-filled in every view.
    // Records that are not JPEG are left untouched and listed in skipped; tiles and orientations
    // as decode()'s.
    void decode_views(const std::vector<Record> &records, const ViewOutputs &views, const DecodeOptions &options,
                      std::vector<std::string> &errors, std::vector<size_t> &skipped,
                      const TileRef *tiles = nullptr, const uint8_t *orientations = nullptr);

    // Records read and entropy-decoded by this decoder so far (one a sample of decode and one a
    // sample of decode_views, however many views it has): waits for a running batch.
    uint64_t records_decoded();

    // A planar uint8 batch (N x 3 x H x W at src; pixels = H * W) into out's float32 planar
    // data, x * scale[c] + shift[c], one sample per pool task (planar_u8_to_float).
    void normalize_planar(const uint8_t *src, size_t n, size_t pixels, const PlanarOutput &out);

private:
    std::string decode_one(const Record &record, const CropBox &crop, const OutputSlot &target,
                           const TileRef *tile, int slot, const DecodeOptions &options);
    std::string decode_sample_views(const Record &record, size_t k, const ViewOutputs &views, int orientation,
                                    const TileRef *tile, int slot, const DecodeOptions &options);
    // One scratch per pool thread, enough for num_threads(); list the JPEG-like records.
    void prepare(const std::vector<Record> &records, std::vector<char> &is_jpeg, std::vector<size_t> &skipped);

    std::mutex mutex_;  // decode vs resize from different Python threads (GIL released)
    ThreadPool pool_;
    std::vector<std::unique_ptr<DecodeScratch>> scratch_;
    std::vector<std::vector<uint8_t>> splice_;  // per-thread spliced-JPEG buffers
    std::vector<std::unique_ptr<ViewsScratch>> views_;  // per-thread buffers of decode_views
    std::vector<std::unique_ptr<PixelScratch>> pixels_;  // per-thread buffers of the pixel ops
};

}  // namespace fl
