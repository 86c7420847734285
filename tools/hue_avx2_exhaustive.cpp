// Checks csrc/pixel_ops_avx2.cpp's hue lanes against a literal transcription of Pillow's
// Convert.c (rgb2hsv_row, hsv2rgb) over every input: all 2^24 RGB colours for the RGB -> HSV half
// and all 2^24 (h, s, v) for the HSV -> RGB half. The tests compare the AVX2 and scalar kernels on
// images; this is the proof that the lanes' rewrites (one division for rc, gc, bc; i, f and
// s / 255 from integers; round() as trunc(x + 0.5)) never change a byte. A few seconds:
//   g++ -O2 -Icsrc -o /tmp/hue_check tools/hue_avx2_exhaustive.cpp && /tmp/hue_check
#include <cmath>
#include <cstdio>

#include "../csrc/pixel_ops_avx2.cpp"

namespace {

int clip8(int v) { return v < 0 ? 0 : (v > 255 ? 255 : v); }

void convert_hs(int r, int g, int b, int *uh, int *us) {  // Convert.c's rgb2hsv_row
    const int maxc = std::max(r, std::max(g, b)), minc = std::min(r, std::min(g, b));
    if (minc == maxc) { *uh = 0; *us = 0; return; }
    const float cr = static_cast<float>(maxc - minc), s = cr / static_cast<float>(maxc);
    const float rc = static_cast<float>(maxc - r) / cr, gc = static_cast<float>(maxc - g) / cr;
    const float bc = static_cast<float>(maxc - b) / cr;
    float h;
    if (r == maxc) h = bc - gc;
    else if (g == maxc) h = 2.0 + rc - bc;
    else h = 4.0 + gc - rc;
    h = std::fmod((h / 6.0 + 1.0), 1.0);
    *uh = clip8(static_cast<int>(h * 255.0));
    *us = clip8(static_cast<int>(s * 255.0));
}

void convert_rgb(int h, int s, int v, int *o) {  // Convert.c's hsv2rgb
    if (s == 0) { o[0] = o[1] = o[2] = v; return; }
    const int i = std::floor(static_cast<float>(h) * 6.0 / 255.0);
    const float f = static_cast<float>(h) * 6.0 / 255.0 - static_cast<float>(i);
    const float fs = static_cast<float>(s) / 255.0;
    const int p = clip8(std::round(static_cast<float>(v) * (1.0 - fs)));
    const int q = clip8(std::round(static_cast<float>(v) * (1.0 - fs * f)));
    const int t = clip8(std::round(static_cast<float>(v) * (1.0 - fs * (1.0 - f))));
    const int sectors[7][3] = {{v, t, p}, {q, v, p}, {p, v, t}, {p, q, v}, {t, p, v}, {v, p, q}, {v, t, p}};
    for (int c = 0; c < 3; ++c) o[c] = sectors[i][c];
}

FL_AVX2 long check_hs() {
    long bad = 0;
    const __m256i step = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int r = 0; r < 256; ++r) for (int g = 0; g < 256; ++g) for (int b = 0; b < 256; b += 8) {
        alignas(32) int hue[8], sat[8];
        __m256i h, s;
        fl::pixel::rgb_to_hs(_mm256_set1_epi32(r), _mm256_set1_epi32(g),
                             _mm256_add_epi32(_mm256_set1_epi32(b), step), h, s);
        _mm256_store_si256(reinterpret_cast<__m256i *>(hue), h);
        _mm256_store_si256(reinterpret_cast<__m256i *>(sat), s);
        for (int l = 0; l < 8; ++l) {
            int uh, us;
            convert_hs(r, g, b + l, &uh, &us);
            bad += uh != hue[l] || us != sat[l];
        }
    }
    return bad;
}

FL_AVX2 long check_rgb() {
    long bad = 0;
    const __m256i step = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int h = 0; h < 256; ++h) for (int s = 0; s < 256; ++s) for (int v = 0; v < 256; v += 8) {
        alignas(32) int px[8];
        _mm256_store_si256(reinterpret_cast<__m256i *>(px),
                           fl::pixel::hsv_to_rgb(_mm256_set1_epi32(h), _mm256_set1_epi32(s),
                                                 _mm256_add_epi32(_mm256_set1_epi32(v), step)));
        for (int l = 0; l < 8; ++l) {
            int o[3];
            convert_rgb(h, s, v + l, o);
            bad += (px[l] & 255) != o[0] || ((px[l] >> 8) & 255) != o[1] || (px[l] >> 16) != o[2];
        }
    }
    return bad;
}

}  // namespace

int main() {
    if (!__builtin_cpu_supports("avx2")) { std::puts("no AVX2 on this CPU"); return 2; }
    const long hs = check_hs(), rgb = check_rgb();
    std::printf("rgb -> hsv mismatches: %ld of 2^24; hsv -> rgb mismatches: %ld of 2^24\n", hs, rgb);
    return hs || rgb ? 1 : 0;
}
