// ASan + UBSan run of the coeffs codec (issue 30): encodes each JPEG given, checks a full decode
// and whole decodes at 1/2, 1/4, 1/8 with the AVX2 and the scalar kernels agree, encodes mutated JPEGs (header and EXIF damage
// included), then decodes thousands of mutated and truncated records (full, cropped, resized,
// flipped, DCT-scaled where the JPEG path would scale), and whole records at 1/2, 1/4, 1/8. Any
// memory or UB error aborts the run.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "../../csrc/coeffs.h"

using fl::coeffs::decode_into;

static std::string decode(const std::vector<uint8_t> &rec, fl::CropBox crop, int h, int w, bool flip,
                          std::vector<uint8_t> &out) {
    out.assign(size_t(h) * w * 3, 0);
    fl::RowResizer resizer;
    fl::OutputSlot slot{out.data(), h, w, std::ptrdiff_t(w) * 3, flip};
    return decode_into(rec.data(), rec.size(), crop, slot, resizer, fl::DecodeOptions{});
}

// The whole record at 1/denom, not resampled (the size a damaged header says, bounded).
static std::string decode_scaled(const std::vector<uint8_t> &rec, int denom, int h, int w, std::vector<uint8_t> &out) {
    const int sh = std::min((h + denom - 1) / denom, 2048), sw = std::min((w + denom - 1) / denom, 2048);
    out.assign(size_t(sh) * sw * 3, 0);
    fl::RowResizer resizer;
    fl::OutputSlot slot{out.data(), sh, sw, std::ptrdiff_t(sw) * 3, false};
    return fl::coeffs::decode_scaled(rec.data(), rec.size(), denom, slot, resizer);
}

int main(int argc, char **argv) {
    std::mt19937 rng(12345);
    long failed = 0, decoded = 0, encoded = 0, refused = 0;
    const int rounds = 3000;
    for (int a = 1; a < argc; ++a) {
        std::ifstream f(argv[a], std::ios::binary);
        std::vector<uint8_t> jpeg((std::istreambuf_iterator<char>(f)), {});
        std::vector<uint8_t> rec;
        if (std::string e = fl::coeffs::encode_jpeg(jpeg.data(), jpeg.size(), rec, 1 + a % 4); !e.empty()) {
            std::printf("%s: not encoded: %s\n", argv[a], e.c_str());
            continue;
        }
        fl::coeffs::View view;
        if (!fl::coeffs::open_record(rec.data(), rec.size(), view).empty()) return 2;
        const int H = view.geo.height, W = view.geo.width;
        std::vector<uint8_t> x, y;
        fl::coeffs::set_simd(true);
        decode(rec, {}, H, W, false, x);
        fl::coeffs::set_simd(false);
        decode(rec, {}, H, W, false, y);
        fl::coeffs::set_simd(true);
        for (int denom : {2, 4, 8}) {  // and at each DCT scale (the reduced IDCTs)
            if (x != y) break;
            fl::coeffs::set_simd(true);
            decode_scaled(rec, denom, H, W, x);
            fl::coeffs::set_simd(false);
            decode_scaled(rec, denom, H, W, y);
        }
        fl::coeffs::set_simd(true);
        if (x != y) {
            std::printf("%s: AVX2 and scalar differ\n", argv[a]);
            return 3;
        }
        for (int r = 0; r < rounds / 4; ++r) {  // hostile JPEGs into the encoder (EXIF walk too)
            std::vector<uint8_t> j = jpeg, out;
            for (int i = 0, n = 1 + int(rng() % 6); i < n; ++i)
                j[rng() % std::min<size_t>(r % 2 ? 400 : j.size(), j.size())] = uint8_t(rng());
            if (r % 5 == 0) j.resize(rng() % j.size());
            (fl::coeffs::encode_jpeg(j.data(), j.size(), out).empty() ? encoded : refused)++;
        }
        for (int r = 0; r < rounds; ++r) {
            std::vector<uint8_t> m = rec;
            const int kind = int(rng() % 4);
            if (kind == 0) m.resize(rng() % m.size());
            if (kind == 1)
                for (int i = 0, n = 1 + int(rng() % 6); i < n; ++i) m[6 + rng() % (m.size() - 6)] = uint8_t(rng());
            if (kind == 2)
                for (int i = 0, n = 1 + int(rng() % 3); i < n; ++i) m[6 + rng() % std::min<size_t>(500, m.size() - 6)] = uint8_t(rng());
            if (kind == 3) m[m.size() / 3 + rng() % (m.size() - m.size() / 3)] ^= uint8_t(1u << (rng() % 8));
            fl::coeffs::set_simd(r % 2 == 0);
            const bool whole = r % 3 == 0;
            fl::CropBox crop = whole ? fl::CropBox{} : fl::CropBox{int(rng() % H), int(rng() % W), 1, 1};
            if (!whole) {
                crop.height = 1 + int(rng() % (H - crop.top));
                crop.width = 1 + int(rng() % (W - crop.left));
            }
            const bool full = whole && r % 2 == 0;  // else a small output: DCT-scaled where large enough
            const int oh = full ? H : 1 + int(rng() % 40), ow = full ? W : 1 + int(rng() % 40);
            std::string e = decode(m, crop, std::min(oh, 2048), std::min(ow, 2048), r % 2, x);
            (e.empty() ? decoded : failed)++;
            if (r % 4 == 1) (decode_scaled(m, 2 << (r % 3), H, W, x).empty() ? decoded : failed)++;
            if (r % 8 == 0) {  // and back to JPEG (record_to_jpeg decodes every segment)
                std::vector<uint8_t> j;
                fl::coeffs::record_to_jpeg(m.data(), m.size(), j);
            }
        }
    }
    std::printf("sanitized run: %ld records decoded, %ld refused; %ld mutated JPEGs encoded, %ld "
                "refused; no memory or UB error\n", decoded, failed, encoded, refused);
    return 0;
}
