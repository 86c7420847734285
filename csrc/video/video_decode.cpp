// libav* decode of a window of frames (see video_decode.h): an in-memory AVIOContext, the
// container's own headers (no avformat_find_stream_info, which decodes frames of every clip to
// guess what the headers of MP4/MKV/WebM already say), a seek, a forward decode, swscale.
#include "video_decode.h"

#include "../resize.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libswscale/swscale.h>
}

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

namespace flv {
namespace {

constexpr int kIoBuffer = 1 << 16;

struct Source {  // what the AVIOContext reads: the caller's buffer, never copied
    const uint8_t *data;
    size_t size;
    size_t pos;
};

int read_source(void *opaque, uint8_t *buf, int n) {
    auto *s = static_cast<Source *>(opaque);
    const size_t left = s->size - s->pos;
    if (left == 0) return AVERROR_EOF;
    const size_t k = std::min(left, static_cast<size_t>(n));
    std::memcpy(buf, s->data + s->pos, k);
    s->pos += k;
    return static_cast<int>(k);
}

int64_t seek_source(void *opaque, int64_t offset, int whence) {
    auto *s = static_cast<Source *>(opaque);
    if (whence & AVSEEK_SIZE) return static_cast<int64_t>(s->size);
    const int64_t base = (whence & 0x3) == SEEK_CUR ? static_cast<int64_t>(s->pos)
                         : (whence & 0x3) == SEEK_END ? static_cast<int64_t>(s->size) : 0;
    const int64_t to = base + offset;
    if (to < 0 || to > static_cast<int64_t>(s->size)) return AVERROR(EINVAL);
    s->pos = static_cast<size_t>(to);
    return to;
}

std::string error_text(int code) {
    char text[AV_ERROR_MAX_STRING_SIZE] = {0};
    av_strerror(code, text, sizeof(text));
    return text;
}

// Each thread's swscale context and RGB scratch rows, kept between windows (a context costs
// more to build than to run on one small frame).
struct Converter {
    SwsContext *sws = nullptr;
    std::vector<uint8_t> rows;
    fl::RowResizer resizer;
    ~Converter() { sws_freeContext(sws); }
};
thread_local Converter converter;

// Whether [start, end) lies inside one of the frame's buffers (a plane's rows, padding
// included, may be read only where the decoder allocated them).
bool allocated(const AVFrame *frame, const uint8_t *start, const uint8_t *end) {
    for (const AVBufferRef *buf : frame->buf) {
        if (buf != nullptr && start >= buf->data && end <= buf->data + buf->size) return true;
    }
    return false;
}

// The crop of one frame as RGB24, scaled and flipped into its slot of out. swscale converts whole groups of 8 pixels and pairs
// of rows only (the x86 yuv2rgb of FFmpeg <= 6 leaves a narrower tail black, and an odd row
// count shifts the chroma rows), so the conversion runs over the crop's rows from an even row
// and column (4:2:0 chroma sits on pairs) at a width rounded up to 8 and a height rounded up
// to 2, reading into the frame's padding where its buffers hold it; only the crop goes
// on, to the resizer or copied. Bit-identical to converting the whole frame. False where the padding is not there.
bool convert(const AVFrame *frame, const Crop &crop, const WindowOut &out, uint8_t *dst) {
    const auto format = static_cast<AVPixelFormat>(frame->format);
    const AVPixFmtDescriptor *desc = av_pix_fmt_desc_get(format);
    if (desc == nullptr || (desc->flags & AV_PIX_FMT_FLAG_HWACCEL)) return false;
    int columns = INT32_MAX;  // the luma columns every plane's line holds, padding included
    for (int p = 0; p < 4 && frame->data[p] != nullptr; ++p) {
        const int shift_x = (p == 1 || p == 2) ? desc->log2_chroma_w : 0;
        const int step = desc->comp[p < desc->nb_components ? p : 0].step;
        columns = std::min(columns, (frame->linesize[p] / step) << shift_x);
    }
    // From an even column, 8-pixel groups; moved left (still even) where the crop's last group
    // would run past the lines' padding.
    const int right = crop.left + crop.width;
    int x0 = crop.left & ~1;
    int width = (right - x0 + 7) & ~7;
    if (x0 + width > columns) {
        x0 = std::max(0, columns - width) & ~1;
        width = (right - x0 + 7) & ~7;
    }
    if (x0 + width > columns) return false;
    const int y0 = crop.top & ~1;
    const int height = (crop.top + crop.height - y0 + 1) & ~1;
    // An odd size with subsampled chroma takes another swscale path in newer FFmpeg (the
    // reference PyAV bundles), whose rounding this one does not repeat: PyAV converts those.
    if (((frame->width & 1) && desc->log2_chroma_w) || ((frame->height & 1) && desc->log2_chroma_h))
        return false;
    const uint8_t *planes[4] = {nullptr, nullptr, nullptr, nullptr};
    for (int p = 0; p < 4 && frame->data[p] != nullptr; ++p) {
        const bool chroma = p == 1 || p == 2;
        const int shift_x = chroma ? desc->log2_chroma_w : 0;
        const int shift_y = chroma ? desc->log2_chroma_h : 0;
        const int step = desc->comp[p < desc->nb_components ? p : 0].step;
        const ptrdiff_t line = frame->linesize[p];
        const int rows = (height + (1 << shift_y) - 1) >> shift_y;
        planes[p] = frame->data[p] + (y0 >> shift_y) * line + (x0 >> shift_x) * step;
        const uint8_t *end = planes[p] + (rows - 1) * line + ((width >> shift_x) * step);
        if (line < (((x0 + width) >> shift_x) * step) || !allocated(frame, planes[p], end))
            return false;
    }
    converter.sws = sws_getCachedContext(converter.sws, width, height, format, width, height,
                                         AV_PIX_FMT_RGB24, SWS_BILINEAR, nullptr, nullptr,
                                         nullptr);
    if (converter.sws == nullptr) return false;
    converter.rows.resize(static_cast<size_t>(width) * 3 * height + 64);
    uint8_t *rows[4] = {converter.rows.data(), nullptr, nullptr, nullptr};
    const int row_size[4] = {width * 3, 0, 0, 0};
    sws_scale(converter.sws, planes, frame->linesize, 0, height, rows, row_size);
    const size_t line = static_cast<size_t>(width) * 3;
    const int cx = crop.left - x0, cy = crop.top - y0;
    if (out.height == crop.height && out.width == crop.width) {
        for (int y = 0; y < crop.height; ++y)
            fl::copy_row(converter.rows.data() + (cy + y) * line + cx * 3,
                         dst + static_cast<size_t>(y) * crop.width * 3, crop.width, out.flip);
        return true;
    }
    fl::RowResizer &resizer = converter.resizer;
    const fl::ResizeTarget target{dst, out.height, out.width,
                                  static_cast<std::ptrdiff_t>(out.width) * 3, out.flip};
    // The crop alone is the resizer's image: its edges clamp the taps, as a cut frame's do
    // (never the pixels around it, nor the padding the conversion read).
    resizer.plan(crop.width, 0.0f, static_cast<float>(crop.width), crop.height, 0.0f,
                 static_cast<float>(crop.height), target);
    resizer.start(line, static_cast<size_t>(cx) * 3);
    for (int y = resizer.first_row(); y < resizer.end_row(); ++y) {
        std::memcpy(resizer.row_buffer(), converter.rows.data() + (cy + y) * line, line);
        resizer.push_row();
    }
    return true;
}

struct FormatCloser {
    void operator()(AVFormatContext *f) const { avformat_close_input(&f); }
};
struct IoCloser {
    void operator()(AVIOContext *io) const {
        av_freep(&io->buffer);
        avio_context_free(&io);
    }
};
struct CodecCloser {
    void operator()(AVCodecContext *c) const { avcodec_free_context(&c); }
};
struct PacketCloser {
    void operator()(AVPacket *p) const { av_packet_free(&p); }
};
struct FrameCloser {
    void operator()(AVFrame *f) const { av_frame_free(&f); }
};

Result fail(const std::string &what) { return {kDamaged, what}; }
Result left(const std::string &what) { return {kLeft, what}; }

}  // namespace

Result decode_window(const uint8_t *data, size_t size, int64_t seek_pts, const int64_t *pts,
                     size_t count, int threads, int thread_type, Crop crop, WindowOut out) {
    if (count == 0) return {kDecoded, ""};
    Source source{data, size, 0};
    auto *buffer = static_cast<uint8_t *>(av_malloc(kIoBuffer));
    std::unique_ptr<AVIOContext, IoCloser> io(
        avio_alloc_context(buffer, kIoBuffer, 0, &source, read_source, nullptr, seek_source));
    if (!io) {
        av_free(buffer);
        return fail("out of memory for the reader");
    }
    AVFormatContext *raw = avformat_alloc_context();
    raw->pb = io.get();
    int ret = avformat_open_input(&raw, nullptr, nullptr, nullptr);
    if (ret < 0) return fail("not a readable video container (" + error_text(ret) + ")");
    std::unique_ptr<AVFormatContext, FormatCloser> format(raw);
    int stream = av_find_best_stream(format.get(), AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
    if (stream < 0 || format->streams[stream]->codecpar->width <= 0) {
        // a container whose headers do not say it (MPEG-TS): probe the stream as PyAV does
        ret = avformat_find_stream_info(format.get(), nullptr);
        if (ret < 0) return fail("the streams cannot be read (" + error_text(ret) + ")");
        stream = av_find_best_stream(format.get(), AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
        if (stream < 0) return fail("the container has no video stream");
    }
    AVStream *video = format->streams[stream];
    const AVCodec *codec = avcodec_find_decoder(video->codecpar->codec_id);
    if (codec == nullptr) return left("no decoder for this codec in the linked FFmpeg");
    std::unique_ptr<AVCodecContext, CodecCloser> context(avcodec_alloc_context3(codec));
    if (!context || avcodec_parameters_to_context(context.get(), video->codecpar) < 0)
        return fail("the stream's codec parameters are unusable");
    context->thread_count = threads;
    context->thread_type = thread_type;
    context->pkt_timebase = video->time_base;
    ret = avcodec_open2(context.get(), codec, nullptr);
    if (ret < 0) return fail("the decoder does not open (" + error_text(ret) + ")");
    ret = av_seek_frame(format.get(), stream, seek_pts, AVSEEK_FLAG_BACKWARD);
    if (ret < 0) return fail("seeking to pts " + std::to_string(seek_pts) + " failed (" +
                             error_text(ret) + ")");

    std::unique_ptr<AVPacket, PacketCloser> packet(av_packet_alloc());
    std::unique_ptr<AVFrame, FrameCloser> frame(av_frame_alloc());
    const int64_t *end = pts + count;
    const int64_t last = pts[count - 1];
    const size_t frame_bytes = static_cast<size_t>(out.height) * out.width * 3;
    size_t found = 0, sent = 0;  // sent: packets of wanted frames given to the decoder
    bool past = false, flushed = false;
    while (!past && found < count && !flushed) {
        // Once every wanted frame's packet is in, a flush gives the frames the decoder holds
        // back for reordering, without decoding the packets after them.
        ret = sent == count ? AVERROR_EOF : av_read_frame(format.get(), packet.get());
        if (ret == AVERROR_EOF) {
            flushed = true;
            ret = avcodec_send_packet(context.get(), nullptr);
        } else if (ret < 0) {
            return fail("demuxing failed (" + error_text(ret) + ")");
        } else if (packet->stream_index != stream) {
            av_packet_unref(packet.get());
            continue;
        } else {
            const bool wanted = std::binary_search(pts, end, packet->pts);
            sent += wanted;
            context->skip_frame = wanted ? AVDISCARD_DEFAULT : AVDISCARD_NONREF;
            ret = avcodec_send_packet(context.get(), packet.get());
            av_packet_unref(packet.get());
        }
        if (ret < 0 && ret != AVERROR(EAGAIN) && ret != AVERROR_EOF)
            return fail("decoding failed (" + error_text(ret) + ")");
        while ((ret = avcodec_receive_frame(context.get(), frame.get())) == 0) {
            const int64_t at = frame->pts;
            const int64_t *slot = std::lower_bound(pts, end, at);
            if (at != AV_NOPTS_VALUE && slot != end && *slot == at && !out.found[slot - pts]) {
                const size_t k = static_cast<size_t>(slot - pts);
                if (crop.top + crop.height > frame->height || crop.left + crop.width > frame->width)
                    return fail("a frame is smaller than the index says: the index is stale");
                if (!convert(frame.get(), crop, out, out.frames + k * frame_bytes))
                    return left("a frame's pixel format or padding is not one this path converts");
                out.found[k] = 1;
                ++found;
            }
            if (at != AV_NOPTS_VALUE && at > last) past = true;
            av_frame_unref(frame.get());
        }
        if (ret != AVERROR(EAGAIN) && ret != AVERROR_EOF)
            return fail("decoding failed (" + error_text(ret) + ")");
    }
    return {kDecoded, ""};
}

}  // namespace flv
