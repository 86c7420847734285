// HWC uint8 pixels -> planar (CHW) float32 `x * scale[c] + shift[c]` or planar uint8, per sample.
#pragma once
#include <cstddef>
#include <cstdint>

namespace fl {

// Where a batch decode also writes each sample planar (NCHW), right after its resize while
// the sample's pixels are still in cache. data == nullptr: no planar output.
struct PlanarOutput {
    void *data = nullptr;   // N x 3 x H x W, float32 when is_float, else uint8
    bool is_float = true;
    float scale[3] = {1.0f, 1.0f, 1.0f};
    float shift[3] = {0.0f, 0.0f, 0.0f};
};

// dst[c * pixels + i] = float(src[3 * i + c]) * scale[c] + shift[c], a multiply then an add in
// float32 (no fused multiply-add), so the AVX2 and scalar kernels give the same bits.
void hwc_to_planar_float(const uint8_t *src, size_t pixels, const float *scale, const float *shift,
                         float *dst);

// dst[c * pixels + i] = src[3 * i + c].
void hwc_to_planar_u8(const uint8_t *src, size_t pixels, uint8_t *dst);

// dst[c * pixels + i] = float(src[c * pixels + i]) * scale[c] + shift[c]: a planar uint8 sample
// (after a batch_transform) to float32 with the very operations of hwc_to_planar_float, so a
// transform that changes nothing gives the bits of the fused path.
void planar_u8_to_float(const uint8_t *src, size_t pixels, const float *scale, const float *shift,
                        float *dst);

// Sample k of an N x H x W x 3 batch (already decoded at src) into its planar slot of `out`.
void write_planar(const uint8_t *src, size_t pixels, size_t k, const PlanarOutput &out);

}  // namespace fl
