// ASan + UBSan run of the FLAC/WAV decoders (issue 31): each clip given is decoded whole, then
// thousands of mutated and truncated copies (each in a buffer of exactly its size, so a read
// past the end is caught) are decoded at random crops, mono and not, planar and interleaved.
// Any memory or UB error aborts the run; the counts of each status are printed.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <vector>

#include "../../csrc/audio.h"

namespace {

std::vector<uint8_t> mutate(const std::vector<uint8_t> &clip, std::mt19937 &rng) {
    std::vector<uint8_t> d = clip;
    auto pick = [&](size_t n) { return n ? size_t(rng() % n) : 0; };
    switch (rng() % 5) {
    case 0: d.resize(pick(d.size())); break;                            // truncated
    case 1: for (int k = 1 + rng() % 8; k--;) d[pick(d.size())] = uint8_t(rng()); break;
    case 2: for (int k = 1 + rng() % 4; k--;) d[pick(std::min<size_t>(120, d.size()))] = uint8_t(rng()); break;
    case 3: d[d.size() / 4 + pick(d.size() - d.size() / 4)] ^= uint8_t(1 << (rng() % 8)); break;
    default: {                                                           // a chunk cut out or doubled
        const size_t at = pick(d.size()), n = std::min(d.size() - at, size_t(1 + rng() % 300));
        if (rng() & 1) d.erase(d.begin() + at, d.begin() + at + n);
        else d.insert(d.begin() + at, clip.begin() + at, clip.begin() + at + n);
    }
    }
    return d;
}

}  // namespace

int main(int argc, char **argv) {
    std::mt19937 rng(31);
    long counts[3] = {0, 0, 0};
    for (int a = 1; a < argc; ++a) {
        std::ifstream f(argv[a], std::ios::binary);
        const std::vector<uint8_t> clip((std::istreambuf_iterator<char>(f)), {});
        for (int round = 0; round < 4000; ++round) {
            const std::vector<uint8_t> d = round ? mutate(clip, rng) : clip;
            std::unique_ptr<uint8_t[]> exact(new uint8_t[d.size() ? d.size() : 1]);
            std::copy(d.begin(), d.end(), exact.get());
            const int64_t start = round ? rng() % 40000 : 0, frames = round ? rng() % 40000 : 1 << 22;
            const bool mono = round == 0 || (rng() & 1), planar = rng() & 1;  // whole: mono
            const int channels = mono ? 1 : 1 + int(rng() % 3);
            std::vector<float> out(size_t(channels) * size_t(frames) + 1);
            fl::AudioOut o;
            o.data = out.data();
            o.channels = channels;
            o.mono = mono;
            o.frame_stride = planar ? 1 : channels;
            o.channel_stride = planar ? frames : 1;
            const fl::AudioResult r = fl::audio_decode(exact.get(), d.size(), start, frames, o);
            fl::audio_info(exact.get(), d.size());
            if (round == 0 && r.status != fl::AudioStatus::kOk)
                std::printf("%s: whole decode: %s\n", argv[a], r.message.c_str());
            counts[int(r.status)]++;
        }
    }
    std::printf("decoded %ld, left to libsndfile %ld, refused %ld\n", counts[0], counts[1], counts[2]);
    return 0;
}
