//! The C ABI of libloaderx (documented in zig/include/loaderx.h): the root of the export files,
//! which are the only files with C exports, one job each. Every argument is validated there and
//! nothing a caller passes may panic; the core returns errors, and exports_status.zig turns them
//! into the status and the message a caller reads.

/// Bumped on every change to loaderx.h; loaderx/_native.py refuses a library with another value.
pub const abi_version: u32 = 19;

export fn lx_abi_version() callconv(.c) u32 {
    return abi_version;
}

comptime {
    // Referencing a file is what makes its exports part of the library.
    _ = @import("exports_status.zig"); // lx_status_name, lx_last_error; how every export answers
    _ = @import("exports_process.zig"); // the pool and stores policies, lx_after_fork_child
    _ = @import("exports_store.zig"); // the calls of one store alone, lx_stores_delete
    _ = @import("exports_view.zig"); // lx_view_open
    _ = @import("exports_reads.zig"); // the calls a store and a view share: lx_{store,view}_*
    _ = @import("exports_arrays.zig"); // 32-bit halves and NumPy arrays: the binding's fast path
    _ = @import("exports_sampler.zig"); // lx_sampler_fill, lx_sampler_batch
    _ = @import("exports_sums.zig"); // lx_record_sums
    _ = @import("exports_pad.zig"); // lx_batch_pad
}
