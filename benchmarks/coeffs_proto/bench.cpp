// Prototype benchmark (issue 30): our record codec vs libjpeg-turbo, interleaved per image.
// usage: coeffs_bench ROUNDS SEG_MCUS LISTFILE   (prints one JSON object)
#include <cstdio>  // jpeglib.h needs FILE and size_t first
#include <jpeglib.h>
#include <time.h>

#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "codec.h"

namespace {

struct ErrMgr {
  jpeg_error_mgr pub;
  jmp_buf jump;
};
void on_error(j_common_ptr cinfo) { longjmp(reinterpret_cast<ErrMgr*>(cinfo->err)->jump, 1); }
void on_message(j_common_ptr) {}

// One reused libjpeg decompressor, as a loader thread keeps one.
struct Lj {
  jpeg_decompress_struct cinfo;
  ErrMgr err;
  Lj() {
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = on_error;
    err.pub.output_message = on_message;
    jpeg_create_decompress(&cinfo);
  }
  ~Lj() { jpeg_destroy_decompress(&cinfo); }
};

// Entropy decoding alone: jpeg_read_coefficients.
void lj_coeffs(Lj& lj, const std::vector<uint8_t>& f) {
  if (setjmp(lj.err.jump)) abort();
  jpeg_mem_src(&lj.cinfo, f.data(), f.size());
  jpeg_read_header(&lj.cinfo, TRUE);
  jpeg_read_coefficients(&lj.cinfo);
  jpeg_abort_decompress(&lj.cinfo);
}

// Default full decode to RGB (ISLOW, fancy upsampling), or a crop: jpeg_crop_scanline +
// jpeg_skip_scanlines, stopping after the crop's last row. Returns the output width.
int lj_decode(Lj& lj, const std::vector<uint8_t>& f, std::vector<uint8_t>& out, int cx, int cy,
              int cw, int chh, bool crop) {
  if (setjmp(lj.err.jump)) abort();
  jpeg_mem_src(&lj.cinfo, f.data(), f.size());
  jpeg_read_header(&lj.cinfo, TRUE);
  jpeg_start_decompress(&lj.cinfo);
  JDIMENSION x = JDIMENSION(cx), w = JDIMENSION(cw);
  int y0 = 0, rows = int(lj.cinfo.output_height);
  if (crop) {
    jpeg_crop_scanline(&lj.cinfo, &x, &w);
    if (cy) jpeg_skip_scanlines(&lj.cinfo, JDIMENSION(cy));
    y0 = cy;
    rows = chh;
  } else {
    w = lj.cinfo.output_width;
  }
  int nc = lj.cinfo.output_components;
  out.resize(size_t(w) * nc * rows);
  while (int(lj.cinfo.output_scanline) < y0 + rows) {
    JSAMPROW row = out.data() + size_t(int(lj.cinfo.output_scanline) - y0) * w * nc;
    jpeg_read_scanlines(&lj.cinfo, &row, 1);
  }
  if (crop)
    jpeg_abort_decompress(&lj.cinfo);
  else
    jpeg_finish_decompress(&lj.cinfo);
  return int(w);
}

// torchvision RandomResizedCrop.get_params(scale=(0.08, 1), ratio=(3/4, 4/3)).
void rrc(std::mt19937_64& rng, int width, int height, int& x, int& y, int& w, int& h) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  double area = double(width) * height, lr0 = std::log(3.0 / 4.0), lr1 = std::log(4.0 / 3.0);
  for (int t = 0; t < 10; t++) {
    double target = area * (0.08 + u(rng) * 0.92);
    double ar = std::exp(lr0 + u(rng) * (lr1 - lr0));
    w = int(std::lround(std::sqrt(target * ar)));
    h = int(std::lround(std::sqrt(target / ar)));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      y = int(rng() % uint64_t(height - h + 1));
      x = int(rng() % uint64_t(width - w + 1));
      return;
    }
  }
  double in_ratio = double(width) / height;
  if (in_ratio < 3.0 / 4.0) {
    w = width;
    h = int(std::lround(w / (3.0 / 4.0)));
  } else if (in_ratio > 4.0 / 3.0) {
    h = height;
    w = int(std::lround(h * (4.0 / 3.0)));
  } else {
    w = width;
    h = height;
  }
  y = (height - h) / 2;
  x = (width - w) / 2;
}

double now(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

struct Image {
  std::string path;
  std::vector<uint8_t> jpeg, rec_a, rec_r, rec_b, rec_brow, rec_n, rec_nrow, rec_w;
  int width = 0, height = 0;
};

enum Variant {
  kEntLj, kEntA, kEntR, kEntB, kEntN, kEntW, kFullLj, kFullA, kFullB, kFullN, kFullW,
  kCropLj, kCropA, kCropB, kCropBrow, kCropN, kCropNrow, kCropW, kVariants
};
const char* kNames[kVariants] = {
    "entropy_libjpeg", "entropy_bytes", "entropy_rans1", "entropy_streams", "entropy_nibbles",
    "entropy_wide", "full_libjpeg", "full_bytes", "full_streams", "full_nibbles", "full_wide",
    "crop_libjpeg", "crop_bytes", "crop_streams", "crop_streams_rowseg", "crop_nibbles",
    "crop_nibbles_rowseg", "crop_wide"};

bool same_coeffs(const proto::Coeffs& a, const proto::Coeffs& b) {
  if (a.comps.size() != b.comps.size()) return false;
  for (size_t i = 0; i < a.comps.size(); i++)
    if (a.comps[i].blocks != b.comps[i].blocks) return false;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s ROUNDS SEG_MCUS LISTFILE\n", argv[0]);
    return 2;
  }
  int rounds = atoi(argv[1]), seg = atoi(argv[2]);
  std::ifstream list(argv[3]);
  std::vector<Image> imgs;
  std::string line;
  size_t skipped = 0, coef_bad = 0, full_bad = 0, crop_bad = 0;
  double enc_a = 0, enc_b = 0, enc_n = 0, extract = 0;
  proto::Record* rec = proto::new_record();
  Lj lj;
  std::vector<uint8_t> ref, mine, tmp;
  while (std::getline(list, line)) {
    if (line.empty()) continue;
    Image im;
    im.path = line;
    FILE* fp = fopen(line.c_str(), "rb");
    if (!fp) continue;
    fseek(fp, 0, SEEK_END);
    im.jpeg.resize(size_t(ftell(fp)));
    fseek(fp, 0, SEEK_SET);
    if (fread(im.jpeg.data(), 1, im.jpeg.size(), fp) != im.jpeg.size()) abort();
    fclose(fp);
    proto::Coeffs c;
    std::string why;
    double t0 = now(CLOCK_MONOTONIC);
    if (!proto::read_coeffs(im.jpeg.data(), im.jpeg.size(), c, why)) {
      fprintf(stderr, "skip %s: %s\n", line.c_str(), why.c_str());
      skipped++;
      continue;
    }
    double t1 = now(CLOCK_MONOTONIC);
    im.rec_a = proto::encode(c, proto::Layer::Bytes, seg);
    double t2 = now(CLOCK_MONOTONIC);
    im.rec_b = proto::encode(c, proto::Layer::Streams, seg);
    double t3 = now(CLOCK_MONOTONIC);
    im.rec_r = proto::encode(c, proto::Layer::Rans, seg);
    im.rec_brow = proto::encode(c, proto::Layer::Streams, 0);
    double t4 = now(CLOCK_MONOTONIC);
    im.rec_n = proto::encode(c, proto::Layer::Nibbles, seg);
    double t5 = now(CLOCK_MONOTONIC);
    im.rec_nrow = proto::encode(c, proto::Layer::Nibbles, 0);
    im.rec_w = proto::encode(c, proto::Layer::NibblesWide, seg);
    enc_n += t5 - t4;
    extract += t1 - t0;
    enc_a += t2 - t1;
    enc_b += t3 - t2;
    im.width = c.width;
    im.height = c.height;
    // Exactness: coefficients round-trip, full decode and one crop equal libjpeg-turbo's pixels.
    lj_decode(lj, im.jpeg, ref, 0, 0, 0, 0, false);
    size_t nc = c.comps.size() == 1 ? 1 : 3;
    for (const auto* r : {&im.rec_a, &im.rec_r, &im.rec_b, &im.rec_brow, &im.rec_n, &im.rec_nrow, &im.rec_w}) {
      proto::open_record(rec, r->data(), r->size());
      proto::Coeffs got;
      proto::decode_all(rec, got);
      if (!same_coeffs(got, c)) coef_bad++;
      mine.assign(size_t(c.width) * c.height * nc, 0);
      proto::decode_rect(rec, 0, 0, c.width, c.height, mine.data());
      if (mine != ref) full_bad++;
      std::mt19937_64 rng(imgs.size() * 7919 + r->size());
      for (int k = 0; k < 4; k++) {
        int x, y, w, h;
        rrc(rng, c.width, c.height, x, y, w, h);
        if (k == 1) x = 0, y = 0;  // edges: top-left, bottom-right
        if (k == 2) x = c.width - w, y = c.height - h;
        tmp.assign(size_t(w) * h * nc, 0);
        proto::decode_rect(rec, x, y, w, h, tmp.data());
        bool ok = true;
        for (int j = 0; j < h && ok; j++)
          ok = !memcmp(&tmp[size_t(j) * w * nc], &ref[(size_t(y + j) * c.width + x) * nc], size_t(w) * nc);
        if (!ok) crop_bad++;
      }
    }
    imgs.push_back(std::move(im));
  }
  size_t n = imgs.size();
  // Timed rounds: every variant on every image, image by image; the variant order rotates
  // each round so no variant always runs first on a cold cache.
  std::vector<std::vector<double>> wall(size_t(rounds), std::vector<double>(kVariants, 0.0));
  std::vector<std::vector<double>> cpu = wall;
  for (int rd = 0; rd < rounds; rd++) {
    for (size_t i = 0; i < n; i++) {
      Image& im = imgs[i];
      std::mt19937_64 rng(uint64_t(i) * 1000003ull + uint64_t(rd));
      int cx, cy, cw, chh;
      rrc(rng, im.width, im.height, cx, cy, cw, chh);
      size_t nc = 3;
      mine.resize(size_t(im.width) * im.height * nc);
      for (int j = 0; j < kVariants; j++) {
        int v = (j + rd) % kVariants;
        double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID);
        switch (v) {
          case kEntLj: lj_coeffs(lj, im.jpeg); break;
          case kEntA:
          case kEntR:
          case kEntB:
          case kEntN:
          case kEntW: {
            const auto& r = v == kEntA   ? im.rec_a
                            : v == kEntR ? im.rec_r
                            : v == kEntB ? im.rec_b
                            : v == kEntN ? im.rec_n
                                         : im.rec_w;
            proto::open_record(rec, r.data(), r.size());
            proto::Coeffs& got = const_cast<proto::Coeffs&>(proto::record_geometry(rec));
            proto::decode_all(rec, got);
            break;
          }
          case kFullLj: lj_decode(lj, im.jpeg, ref, 0, 0, 0, 0, false); break;
          case kFullA:
          case kFullB:
          case kFullN:
          case kFullW: {
            const auto& r = v == kFullA   ? im.rec_a
                            : v == kFullB ? im.rec_b
                            : v == kFullN ? im.rec_n
                                          : im.rec_w;
            proto::open_record(rec, r.data(), r.size());
            proto::decode_rect(rec, 0, 0, im.width, im.height, mine.data());
            break;
          }
          case kCropLj: lj_decode(lj, im.jpeg, ref, cx, cy, cw, chh, true); break;
          default: {
            const auto& r = v == kCropA      ? im.rec_a
                            : v == kCropB    ? im.rec_b
                            : v == kCropBrow ? im.rec_brow
                            : v == kCropN    ? im.rec_n
                            : v == kCropNrow ? im.rec_nrow
                                             : im.rec_w;
            proto::open_record(rec, r.data(), r.size());
            proto::decode_rect(rec, cx, cy, cw, chh, mine.data());
          }
        }
        wall[size_t(rd)][size_t(v)] += now(CLOCK_MONOTONIC) - w0;
        cpu[size_t(rd)][size_t(v)] += now(CLOCK_THREAD_CPUTIME_ID) - c0;
      }
    }
  }
  size_t bj = 0, ba = 0, bb = 0, bbr = 0, br = 0, bn = 0, bnr = 0, bw = 0;
  for (const auto& im : imgs) {
    bj += im.jpeg.size();
    bn += im.rec_n.size();
    bnr += im.rec_nrow.size();
    bw += im.rec_w.size();
    br += im.rec_r.size();
    ba += im.rec_a.size();
    bb += im.rec_b.size();
    bbr += im.rec_brow.size();
  }
  printf("{\"images\": %zu, \"skipped\": %zu, \"seg_mcus\": %d, \"rounds\": %d,\n", n, skipped, seg,
         rounds);
  printf(" \"coef_mismatch\": %zu, \"full_mismatch\": %zu, \"crop_mismatch\": %zu,\n", coef_bad,
         full_bad, crop_bad);
  printf(" \"bytes\": {\"jpeg\": %zu, \"bytes\": %zu, \"rans1\": %zu, \"streams\": %zu, "
         "\"streams_rowseg\": %zu, \"nibbles\": %zu, \"nibbles_rowseg\": %zu, \"wide\": %zu},\n",
         bj, ba, br, bb, bbr, bn, bnr, bw);
  printf(" \"encode_s\": {\"extract\": %.6f, \"bytes\": %.6f, \"streams\": %.6f, \"nibbles\": %.6f},\n", extract, enc_a,
         enc_b, enc_n);
  printf(" \"names\": [");
  for (int v = 0; v < kVariants; v++) printf("%s\"%s\"", v ? ", " : "", kNames[v]);
  printf("],\n \"wall\": [");
  for (int rd = 0; rd < rounds; rd++) {
    printf("%s[", rd ? ", " : "");
    for (int v = 0; v < kVariants; v++) printf("%s%.6f", v ? ", " : "", wall[size_t(rd)][size_t(v)]);
    printf("]");
  }
  printf("],\n \"cpu\": [");
  for (int rd = 0; rd < rounds; rd++) {
    printf("%s[", rd ? ", " : "");
    for (int v = 0; v < kVariants; v++) printf("%s%.6f", v ? ", " : "", cpu[size_t(rd)][size_t(v)]);
    printf("]");
  }
  printf("]}\n");
  proto::free_record(rec);
  return 0;
}
