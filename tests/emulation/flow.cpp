// Runs flow.cu's explicit terms on the CPU (prelude.h) as
// src/solver/projection/cuda.rs launches them, the plain cells' kernel then
// the listed cells', from the file named by argv[1] into the file named by
// argv[2] (the layout: emulated.rs).
#include "prelude.h"
#include "../../kernels/projection/flow.cu"

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    if (!read_input(argv[1])) return 3;
    auto h = take<int>(8);
    auto v = take<float>(8);
    int nx = h[0], ny = h[1], nz = h[2];
    unsigned periodic = h[3], count = h[4];
    int eddy_on = h[5];
    size_t n = (size_t)nx * ny * nz;
    auto u = take<float>(3 * n);
    auto kinds = take<unsigned char>(n);
    auto open = take<unsigned char>(n);
    auto wall = take<float>(3 * n);
    auto eddy = take<float>(n);
    auto cells = take<unsigned>(count);
    float nu = v[0], fx = v[1], fy = v[2], fz = v[3], upwind = v[4];
    std::vector<float> out(3 * n, 12345.0f);
    launch({up(nx, 32), up(ny, 4), (unsigned)nz}, {32, 4, 1}, [&] {
        explicit_terms(u.data(), open.data(), nx, ny, nz, nu, fx, fy, fz, upwind, eddy.data(),
                       eddy_on, out.data());
    });
    if (count > 0)
        launch({up(count, 256), 1, 1}, {256, 1, 1}, [&] {
            explicit_terms_listed(u.data(), kinds.data(), open.data(), wall.data(), nx, ny, nz,
                                  periodic, nu, fx, fy, fz, upwind, eddy.data(), eddy_on, cells.data(),
                                  count, out.data());
        });
    return write_output(argv[2], out) ? 0 : 5;
}
