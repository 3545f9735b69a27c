//! Module root of libloaderx: pulls in the C exports and every file's tests.
const std = @import("std");

comptime {
    // Referencing the file is what makes its `export fn`s part of the library.
    _ = @import("c_abi/exports.zig");
}

test {
    // Every file with tests is listed here so `zig build test` runs them all.
    _ = @import("c_abi/exports.zig");
    _ = @import("base/status.zig");
    _ = @import("base/diagnostic.zig");
    _ = @import("base/limits.zig");
    _ = @import("files/format.zig");
    _ = @import("base/errors.zig");
    _ = @import("os/mapping.zig");
    _ = @import("files/meta.zig");
    _ = @import("files/length_generation.zig");
    _ = @import("files/chunk.zig");
    _ = @import("codec/codec.zig");
    _ = @import("os/pool.zig");
    _ = @import("os/pool_advice.zig");
    _ = @import("store/store.zig");
    _ = @import("batch/batch.zig");
    _ = @import("batch/index_check.zig");
    _ = @import("store/open_check.zig");
    _ = @import("store/store_append.zig");
    _ = @import("store/store_gather.zig");
    _ = @import("store/store_delete.zig");
    _ = @import("store/registry.zig");
    _ = @import("store/gather_streams.zig");
    _ = @import("os/lock.zig");
    _ = @import("os/no_follow.zig");
    _ = @import("store/compaction.zig");
    _ = @import("store/dictionary.zig");
    _ = @import("files/journal.zig");
    _ = @import("codec/checksum.zig");
    _ = @import("store/integrity.zig");
    _ = @import("store/store_test.zig");
    _ = @import("store/store_delete_test.zig");
    _ = @import("store/store_gather_test.zig");
    _ = @import("store/store_space_test.zig");
    _ = @import("view/view.zig");
    _ = @import("view/view_test.zig");
    _ = @import("store/lock_order.zig");
    _ = @import("store/runs.zig");
    _ = @import("base/lazy_table.zig");
    _ = @import("store/raw_copy.zig");
    _ = @import("batch/record_offsets.zig");
    _ = @import("batch/pad_rows.zig");
    _ = @import("batch/padded.zig");
    _ = @import("batch/numpy_array.zig");
    _ = @import("batch/write_pieces.zig");
    _ = @import("sampler/sampler.zig");
    _ = @import("sampler/sampler_test.zig");
    _ = @import("c_abi/exports_test.zig");
    _ = @import("c_abi/exports_handles_test.zig");
    _ = @import("c_abi/exports_batch_test.zig");
    _ = @import("c_abi/exports_packed_arrays_test.zig");
    _ = @import("c_abi/abi_test.zig");
}
