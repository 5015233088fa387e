/* One pass over the inter-token gaps of a block of requests: what a summary needs of them,
 * computed as each gap is read once (analysis/gapkernel.py calls it through ctypes; without it
 * the same figures come from several numpy passes, analysis/summary.py).
 *
 * Per kept request (keep[r] != 0), its lengths[r] gaps (ms) follow one another in gaps[]:
 *   - every gap is added to sums[0] (its sum) and sums[1] (the sum of squares), and counted in
 *     state[0];
 *   - while state[1] == 0, every gap's bucket (its float64 bit pattern shifted right by
 *     `shift`: non-negative floats' bits sort like their values) is counted in counts[], and a
 *     gap whose bucket is wanted (wanted[bucket] != 0; wanted may be NULL) is copied to kept[];
 *     a negative gap (a negative bucket) sets state[1] = 1 and stops the counting;
 *   - when its first chunk's time first_s[r] (s from the bins' start) is finite and there are
 *     bins, each of its chunks is counted in the 1-s bin it falls in (chunk 0 at first_s[r],
 *     chunk j at first_s[r] + the sum of its first j gaps / 1000; a chunk on a whole second
 *     belongs to the bin it opens), bins before the first and after the last counting in those.
 * Returns how many gaps were copied to kept[] (which has room for all the block's gaps).
 * Plain C, no Python: the library is loaded with ctypes, which lets other threads run. */

#include <Python.h> /* first, as Python asks */

#include <math.h>
#include <stdint.h>

static int64_t bin_of(double b, int64_t n_bins)
{
    if (!(b > 0.0))
        return 0;
    if (b >= (double)(n_bins - 1))
        return n_bins - 1;
    return (int64_t)b;
}

int64_t vprof_gap_pass(const double *gaps, const int64_t *lengths, const double *first_s,
                       const uint8_t *keep, int64_t n_requests, const uint8_t *wanted,
                       int64_t *counts, int shift, int64_t *bins, int64_t n_bins,
                       double *kept, double *sums, int64_t *state)
{
    const int64_t *bits = (const int64_t *)gaps;
    int64_t n = 0, k = 0, pos = 0;
    double total = 0.0, total_sq = 0.0;
    int counting = state[1] == 0;
    for (int64_t r = 0; r < n_requests; r++) {
        int64_t len = lengths[r];
        if (!keep[r]) {
            pos += len;
            continue;
        }
        double f = first_s[r];
        int binned = n_bins > 0 && isfinite(f);
        double acc = 0.0, b = 0.0, limit = 0.0;
        int64_t at = 0;
        if (binned) {
            b = floor(f);
            limit = (b + 1.0 - f) * 1000.0; /* the gaps' sum (ms) at which the next bin opens */
            at = bin_of(b, n_bins);
            bins[at] += 1;
        }
        for (int64_t j = pos; j < pos + len; j++) {
            double x = gaps[j];
            total += x;
            total_sq += x * x;
            if (counting) {
                int64_t bucket = bits[j] >> shift;
                if (bucket < 0) {
                    counting = 0;
                    state[1] = 1;
                } else {
                    counts[bucket] += 1;
                    if (wanted && wanted[bucket])
                        kept[k++] = x;
                }
            }
            if (binned) {
                acc += x;
                if (acc >= limit) {
                    if (!isfinite(acc)) {
                        b = (double)n_bins; /* an endless gap: the last bin */
                    } else {
                        /* a gap of seconds jumps near its bin, then steps to it */
                        double near = floor(f + acc / 1000.0) - 1.0;
                        b = near > b + 1.0 ? near : b + 1.0;
                        limit = (b + 1.0 - f) * 1000.0;
                        while (acc >= limit) {
                            b += 1.0;
                            limit = (b + 1.0 - f) * 1000.0;
                        }
                    }
                    at = bin_of(b, n_bins);
                }
                bins[at] += 1;
            }
        }
        n += len;
        pos += len;
    }
    sums[0] += total;
    sums[1] += total_sq;
    state[0] += n;
    return k;
}

/* An importable module too, so that it is found where Python finds vprof's modules. */
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_gappass", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__gappass(void) { return PyModule_Create(&module); }
