// Runs one of poisson.cu's level kernels on the CPU (prelude.h) as
// src/solver/projection/cuda.rs launches it, from the file named by argv[1]
// into the file named by argv[2] (the layout: emulated.rs).
#include "prelude.h"
#include "../../kernels/projection/poisson.cu"

static dim3 cells(int nx, int ny, int nz) { return {up(nx, 32), up(ny, 4), (unsigned)nz}; }

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    if (!read_input(argv[1])) return 3;
    auto h = take<int>(16);
    int mode = h[0], nx = h[1], ny = h[2], nz = h[3], cx = h[8], cy = h[9], cz = h[10];
    unsigned faces = h[4], odd = h[5];
    size_t n = (size_t)nx * ny * nz, nc = (size_t)cx * cy * cz;
    auto links = take<unsigned char>(n);
    auto weights = take<float>(h[6] ? 3 * n : 0);
    auto diag = take<float>(h[7] ? n : 0);
    auto x = take<float>(n);
    auto b = take<float>(n);
    auto coarse_diag = take<float>(mode >= 2 ? nc : 0);
    auto e = take<float>(mode == 3 ? nc : 0);
    const float* w = h[6] ? weights.data() : nullptr;
    const float* d = h[7] ? diag.data() : nullptr;
    std::vector<float> out;
    if (mode == 0) {
        out.assign(n, 0.0f);
        launch(cells(nx, ny, nz), {32, 4, 1}, [&] {
            apply(links.data(), w, d, nx, ny, nz, faces, x.data(), b.data(), 1, out.data());
        });
    } else if (mode == 1) {
        int passes = __popc(odd);
        for (int s = 0; s < h[11]; s++)
            for (int colour : {h[12], 1 - h[12]})
                for (int pass = 0; pass <= passes; pass++)
                    launch(cells(up(nx, 2), ny, nz), {32, 4, 1}, [&] {
                        smooth(links.data(), w, d, nx, ny, nz, faces, x.data(), b.data(), colour,
                               odd, pass);
                    });
        out = x;
    } else if (mode == 2) {
        out.assign(nc, 0.0f);
        launch(cells(cx, cy, cz), {32, 4, 1}, [&] {
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
    } else if (mode == 5) {
        // smooth_sweep's sweeps, from one vector to the other in turn, h[13]
        // planes a block.
        std::vector<float> other(n);
        float* from = x.data();
        float* to = other.data();
        int span = h[13];
        for (int s = 0; s < h[11]; s++) {
            launch({up(nx, 60), up(ny, 8), up(nz, span)}, {32, 10, 1}, [&] {
                smooth_sweep(links.data(), w, d, nx, ny, nz, faces, from, to, b.data(), h[12],
                             span);
            });
            std::swap(from, to);
        }
        out.assign(from, from + n);
    } else {
        return 4;
    }
    return write_output(argv[2], out) ? 0 : 5;
}
