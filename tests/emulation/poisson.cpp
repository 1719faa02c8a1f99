// Runs one of poisson.cu's level kernels on the CPU (prelude.h) as
// src/solver/projection/cuda.rs launches it, from the file named by argv[1]
// into the file named by argv[2] (the layout: emulated.rs).
#include "prelude.h"
#include "../../kernels/projection/poisson.cu"

static dim3 cells(int nx, int ny, int nz) { return {up(nx, 32), up(ny, 4), (unsigned)nz}; }

// Whether h[11] sweeps from x = 0 (h[13]) start with a pass that zeroes the
// other colour: not along a periodic axis of odd length (`odd`), where x is
// zeroed first.
static bool zero_pass(const std::vector<int>& h, unsigned odd) {
    return h[13] && odd == 0 && h[11] > 0;
}

// The colour passes of h[11] sweeps as cuda.rs's `smooth` queues them, the
// first colour h[12], from x = 0 when h[13]: run(colour, pass, zero, last),
// `last` for the last sweep's second colour.
template <class T, class F>
static void sweeps(const std::vector<int>& h, unsigned odd, std::vector<T>& x, F run) {
    bool from_zero = zero_pass(h, odd);
    if (h[13] && !from_zero) std::fill(x.begin(), x.end(), T(0));
    int passes = __popc(odd);
    for (int k = 0; k < h[11]; k++)
        for (int second : {0, 1})
            for (int pass = 0; pass <= passes; pass++)
                run(second ? 1 - h[12] : h[12], pass, from_zero && k == 0 && !second,
                    k + 1 == h[11] && second);
}

// A vector in split rows back in the natural order.
static std::vector<float> from_split(const std::vector<float>& xs, int nx, int ny, int nz) {
    Level l = {{nx, ny, nz}, 0};
    std::vector<float> out(xs.size());
    for (int z = 0; z < nz; z++)
        for (int y = 0; y < ny; y++)
            for (int x0 = 0; x0 < nx; x0++) {
                int p[3] = {x0, y, z};
                out[index_of(l, p)] = xs[Split().at(l, p)];
            }
    return out;
}

// A vector stored in 16 bits by `s` in split rows.
static std::vector<unsigned short> to_split_half(const std::vector<float>& v, Half s, int nx, int ny,
                                                 int nz) {
    Level l = {{nx, ny, nz}, 0};
    std::vector<unsigned short> out(v.size());
    for (int z = 0; z < nz; z++)
        for (int y = 0; y < ny; y++)
            for (int x0 = 0; x0 < nx; x0++) {
                int p[3] = {x0, y, z};
                out[Split().at(l, p)] = s.enc(v[index_of(l, p)]);
            }
    return out;
}

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    if (!read_input(argv[1])) return 3;
    auto h = take<int>(17);
    int mode = h[0], nx = h[1], ny = h[2], nz = h[3], cx = h[8], cy = h[9], cz = h[10];
    unsigned faces = h[4], odd = h[5];
    // The sweeps' over-relaxation.
    float omega;
    std::memcpy(&omega, &h[16], 4);
    size_t n = (size_t)nx * ny * nz, nc = (size_t)cx * cy * cz;
    auto links = take<unsigned char>(n);
    // h[6]: 1 three arrays of couplings, 2 the packed words (`Packed`).
    auto weights = take<float>(h[6] == 2 ? n : h[6] ? 3 * n : 0);
    auto diag = take<float>(h[7] ? n : 0);
    auto x = take<float>(n);
    auto b = take<float>(n);
    auto coarse_diag = take<float>(mode >= 2 ? nc : 0);
    auto e = take<float>(mode == 3 || mode == 7 || mode == 12 || mode == 16 || mode == 20 ? nc : mode == 13 ? 2 * n : 0);
    const float* w = h[6] ? weights.data() : nullptr;
    // Packed words (smooth_packed and restrict_residual_packed) stand for
    // the couplings and the diagonal; prolongation still takes the
    // diagonal's array, as the host passes it.
    const float* d = h[7] ? diag.data() : nullptr;
    const unsigned* words = h[6] == 2 ? reinterpret_cast<const unsigned*>(weights.data()) : nullptr;
    std::vector<float> out;
    if (mode == 0) {
        out.assign(n, 0.0f);
        launch(cells(nx, ny, nz), {32, 4, 1}, [&] {
            apply(links.data(), w, d, nx, ny, nz, faces, x.data(), b.data(), 1, out.data());
        });
    } else if (mode == 1) {
        sweeps(h, odd, x, [&](int colour, int pass, int zero, bool) {
            launch(cells(up(nx, 2), ny, nz), {32, 4, 1}, [&] {
                if (words)
                    smooth_packed(links.data(), words, nullptr, nx, ny, nz, faces, x.data(),
                                  b.data(), colour, odd, pass, zero, omega);
                else
                    smooth(links.data(), w, d, nx, ny, nz, faces, x.data(), b.data(), colour,
                           odd, pass, zero, omega);
            });
        });
        out = x;
    } else if (mode == 2) {
        out.assign(nc, 0.0f);
        launch(cells(cx, cy, cz), {32, 4, 1}, [&] {
            if (words)
                restrict_residual_packed(links.data(), words, nullptr, nx, ny, nz, faces,
                                         x.data(), b.data(), coarse_diag.data(), cx, cy, cz,
                                         out.data());
            else
                restrict_residual(links.data(), w, d, nx, ny, nz, faces, x.data(), b.data(),
                                  coarse_diag.data(), cx, cy, cz, out.data());
        });
    } else if (mode == 3) {
        launch(cells(cx, ny, nz), {32, 4, 1}, [&] {
            prolong_add(e.data(), coarse_diag.data(), cx, cy, cz, links.data(), d, nx, ny, nz,
                        faces, x.data());
        });
        out = x;
    } else if (mode == 4) {
        // Three blocks, fewer than the host launches, so that each thread
        // steps through several cells.
        unsigned blocks = 3;
        std::vector<double> partial(2 * blocks);
        out.assign(n + 1, 0.0f);
        launch({blocks, 1, 1}, {256, 1, 1}, [&] {
            apply_dot(links.data(), w, d, nx, ny, nz, faces, x.data(), out.data(), partial.data());
        });
        double dot = 0.0;
        for (unsigned i = 0; i < blocks; i++) dot += partial[2 * i];
        out[n] = (float)dot;
    } else if (mode == 13) {
        // cg_update_check, three blocks as mode 4: e holds d, then r; α's
        // bits in h[14] (the scalars α and 1). out: the new x, the new r,
        // then the sums of the recurrence's r², the new r² and x².
        float alpha;
        std::memcpy(&alpha, &h[14], 4);
        std::vector<double> scalars = {(double)alpha, 1.0};
        unsigned blocks = 3;
        std::vector<double> partial(3 * blocks);
        std::vector<float> r(e.begin() + n, e.end()), moved(n);
        launch({blocks, 1, 1}, {256, 1, 1}, [&] {
            cg_update_check(links.data(), w, d, nx, ny, nz, faces, x.data(), e.data(), b.data(),
                            r.data(), moved.data(), scalars.data(), 0, 1, partial.data());
        });
        out = moved;
        out.insert(out.end(), r.begin(), r.end());
        for (int k = 0; k < 3; k++) {
            double sum = 0.0;
            for (unsigned i = 0; i < blocks; i++)
                sum += k < 2 ? partial[2 * i + k] : partial[2 * blocks + i];
            out.push_back((float)sum);
        }
    } else if (mode == 9) {
        // residual_dots, three blocks as mode 4; out: r, then Σ b·b, Σ r·r,
        // Σ x·x.
        unsigned blocks = 3;
        std::vector<double> partial(3 * blocks);
        out.assign(n + 3, 0.0f);
        launch({blocks, 1, 1}, {256, 1, 1}, [&] {
            residual_dots(links.data(), w, d, nx, ny, nz, faces, x.data(), b.data(), out.data(),
                          partial.data());
        });
        for (int k = 0; k < 3; k++) {
            double sum = 0.0;
            for (unsigned i = 0; i < blocks; i++)
                sum += k < 2 ? partial[2 * i + k] : partial[2 * blocks + i];
            out[n + k] = (float)sum;
        }
    } else if (mode >= 5 && mode <= 7) {
        // The 16-bit kernels (5 smooth, 6 restriction, 7 prolongation) on x
        // and b stored by the window in h[14], h[15] (to_half's), the
        // result read back by from_half.
        float scale[2];
        std::memcpy(&scale[0], &h[14], 4);
        std::memcpy(&scale[1], &h[15], 4);
        Half s = {scale[0], scale[1]};
        std::vector<unsigned short> xh(n), bh(n);
        for (size_t i = 0; i < n; i++) {
            xh[i] = s.enc(x[i]);
            bh[i] = s.enc(b[i]);
        }
        if (mode == 5) {
            sweeps(h, odd, xh, [&](int colour, int pass, int zero, bool) {
                launch(cells(up(nx, 2), ny, nz), {32, 4, 1}, [&] {
                    smooth_half(links.data(), w, d, nx, ny, nz, faces, xh.data(), bh.data(),
                                colour, odd, pass, zero, omega, scale);
                });
            });
        } else if (mode == 6) {
            out.assign(nc, 0.0f);
            launch(cells(cx, cy, cz), {32, 4, 1}, [&] {
                restrict_residual_half(links.data(), w, d, nx, ny, nz, faces, xh.data(),
                                       bh.data(), coarse_diag.data(), cx, cy, cz, out.data(),
                                       scale);
            });
        } else {
            launch(cells(cx, ny, nz), {32, 4, 1}, [&] {
                prolong_add_half(e.data(), coarse_diag.data(), cx, cy, cz, links.data(), d, nx,
                                 ny, nz, faces, xh.data(), scale);
            });
        }
        if (mode != 6) {
            out.assign(n, 0.0f);
            launch({up(n, 256), 1, 1}, {256, 1, 1},
                   [&] { from_half(xh.data(), n, scale, out.data()); });
        }
    } else if (mode == 8) {
        // to_half of x with r·r the f64 in h[14], h[15]; out: the values
        // stored, read back, then the window, then half_window's.
        double rr;
        std::memcpy(&rr, &h[14], 8);
        std::vector<unsigned short> xh(n);
        float scale[2];
        std::vector<double> scalars = {rr};
        launch({up(n, 256), 1, 1}, {256, 1, 1},
               [&] { to_half(x.data(), n, scalars.data(), 0, xh.data(), scale); });
        out.assign(n + 2, 0.0f);
        launch({up(n, 256), 1, 1}, {256, 1, 1},
               [&] { from_half(xh.data(), n, scale, out.data()); });
        out[n] = scale[0];
        out[n + 1] = scale[1];
        float alone[2] = {0.0f, 0.0f};
        launch({1, 1, 1}, {1, 1, 1}, [&] { half_window(scalars.data(), 0, n, alone); });
        out.push_back(alone[0]);
        out.push_back(alone[1]);
    } else if (mode == 14) {
        // smooth_split4 as mode 10 (x's length a multiple of 8, no periodic
        // axis of odd length), a thread per four cells of the colour.
        if (nx % 8 != 0 || odd != 0) return 6;
        std::vector<float> xs(n), bs(n);
        launch(cells(nx, ny, nz), {32, 4, 1}, [&] { to_split(x.data(), nx, ny, nz, xs.data()); });
        if (!zero_pass(h, odd))
            launch(cells(nx, ny, nz), {32, 4, 1},
                   [&] { to_split(b.data(), nx, ny, nz, bs.data()); });
        out.assign(n, -12345.0f);
        sweeps(h, odd, xs, [&](int colour, int, int zero, bool last) {
            launch(cells(nx / 8, ny, nz), {32, 4, 1}, [&] {
                smooth_split4(links.data(), nx, ny, nz, faces, xs.data(), bs.data(), colour, zero,
                              omega, zero ? b.data() : nullptr, last ? out.data() : nullptr);
            });
        });
    } else if (mode >= 18 && mode <= 20) {
        // The four-cell kernels on split rows in 16 bits (18 smooth, 19
        // restriction, 20 prolongation) on x and b stored by the window in
        // h[14], h[15], given in the natural order; the smoother's first
        // pass from zero takes r from b in the natural order, its last
        // pass gives z in it.
        if (nx % 8 != 0 || odd != 0) return 6;
        float scale[2];
        std::memcpy(&scale[0], &h[14], 4);
        std::memcpy(&scale[1], &h[15], 4);
        Half s = {scale[0], scale[1]};
        std::vector<unsigned short> xh = to_split_half(x, s, nx, ny, nz);
        std::vector<unsigned short> bh = to_split_half(b, s, nx, ny, nz);
        if (mode == 18) {
            out.assign(n, -12345.0f);
            sweeps(h, odd, xh, [&](int colour, int, int zero, bool last) {
                launch(cells(nx / 8, ny, nz), {32, 4, 1}, [&] {
                    smooth_split4_half(links.data(), nx, ny, nz, faces, xh.data(), bh.data(),
                                       colour, zero, omega, zero ? b.data() : nullptr,
                                       last ? out.data() : nullptr, scale);
                });
            });
        } else if (mode == 19) {
            out.assign(nc, 0.0f);
            launch(cells(cx / 4, cy, cz), {32, 4, 1}, [&] {
                restrict_residual_split4_half(links.data(), nullptr, nullptr, nx, ny, nz, faces,
                                              xh.data(), bh.data(), coarse_diag.data(), cx, cy,
                                              cz, out.data(), scale);
            });
        } else {
            launch(cells(cx / 4, ny, nz), {32, 4, 1}, [&] {
                prolong_add_split4_half(e.data(), coarse_diag.data(), cx, cy, cz, links.data(),
                                        nullptr, nx, ny, nz, faces, xh.data(), scale);
            });
            Level l = {{nx, ny, nz}, 0};
            out.assign(n, 0.0f);
            for (int z = 0; z < nz; z++)
                for (int y = 0; y < ny; y++)
                    for (int x0 = 0; x0 < nx; x0++) {
                        int p[3] = {x0, y, z};
                        out[index_of(l, p)] = s.dec(xh[Split().at(l, p)]);
                    }
        }
    } else if (mode == 15) {
        // restrict_residual_split4 as mode 11 (x's length a multiple of 8).
        if (nx % 8 != 0) return 6;
        std::vector<float> xs(n), bs(n);
        launch(cells(nx, ny, nz), {32, 4, 1}, [&] { to_split(x.data(), nx, ny, nz, xs.data()); });
        launch(cells(nx, ny, nz), {32, 4, 1}, [&] { to_split(b.data(), nx, ny, nz, bs.data()); });
        out.assign(nc, 0.0f);
        launch(cells(cx / 4, cy, cz), {32, 4, 1}, [&] {
            restrict_residual_split4(links.data(), nullptr, nullptr, nx, ny, nz, faces, xs.data(),
                                     bs.data(), coarse_diag.data(), cx, cy, cz, out.data());
        });
    } else if (mode == 16) {
        // prolong_add_split4 as mode 12 (x's length a multiple of 8).
        if (nx % 8 != 0) return 6;
        std::vector<float> xs(n);
        launch(cells(nx, ny, nz), {32, 4, 1}, [&] { to_split(x.data(), nx, ny, nz, xs.data()); });
        launch(cells(cx / 4, ny, nz), {32, 4, 1}, [&] {
            prolong_add_split4(e.data(), coarse_diag.data(), cx, cy, cz, links.data(), nullptr,
                               nx, ny, nz, faces, xs.data());
        });
        out = from_split(xs, nx, ny, nz);
    } else if (mode >= 10 && mode <= 12) {
        // The kernels on split rows (10 smooth, 11 restriction, 12
        // prolongation), x and b given in the natural order: the links come
        // split by the host, x and b are put in that order by to_split (b,
        // from zero, by the first pass, as the host has it) and the result
        // comes back in the natural order from the last passes (the
        // prolongation's read back here).
        std::vector<float> xs(n), bs(n);
        launch(cells(nx, ny, nz), {32, 4, 1}, [&] { to_split(x.data(), nx, ny, nz, xs.data()); });
        if (mode != 10 || !zero_pass(h, odd))
            launch(cells(nx, ny, nz), {32, 4, 1},
                   [&] { to_split(b.data(), nx, ny, nz, bs.data()); });
        if (mode == 10) {
            // Cells the last passes leave unwritten show.
            out.assign(n, -12345.0f);
            sweeps(h, odd, xs, [&](int colour, int pass, int zero, bool last) {
                launch(cells(up(nx, 2), ny, nz), {32, 4, 1}, [&] {
                    smooth_split(links.data(), nullptr, nullptr, nx, ny, nz, faces, xs.data(),
                                 bs.data(), colour, odd, pass, zero, omega,
                                 zero ? b.data() : nullptr, last ? out.data() : nullptr);
                });
            });
        } else if (mode == 11) {
            out.assign(nc, 0.0f);
            launch(cells(cx, cy, cz), {32, 4, 1}, [&] {
                restrict_residual_split(links.data(), nullptr, nullptr, nx, ny, nz, faces,
                                        xs.data(), bs.data(), coarse_diag.data(), cx, cy, cz,
                                        out.data());
            });
        } else {
            launch(cells(cx, ny, nz), {32, 4, 1}, [&] {
                prolong_add_split(e.data(), coarse_diag.data(), cx, cy, cz, links.data(), nullptr,
                                  nx, ny, nz, faces, xs.data());
            });
            out = from_split(xs, nx, ny, nz);
        }
    } else {
        return 4;
    }
    return write_output(argv[2], out) ? 0 : 5;
}
