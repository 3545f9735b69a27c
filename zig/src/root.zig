//! Module root of libloaderx: pulls in the C exports and every file's tests.
const std = @import("std");

comptime {
    // Referencing the file is what makes its `export fn`s part of the library.
    _ = @import("c_abi/exports.zig");
}

test {
    // Every file with tests is listed here so `zig build test` runs them all.
    _ = @import("c_abi/exports.zig");
    _ = @import("status.zig");
    _ = @import("diagnostic.zig");
    _ = @import("limits.zig");
    _ = @import("format.zig");
    _ = @import("errors.zig");
    _ = @import("mapping.zig");
    _ = @import("meta.zig");
    _ = @import("chunk.zig");
    _ = @import("codec.zig");
    _ = @import("pool.zig");
    _ = @import("pool_advice.zig");
    _ = @import("store.zig");
    _ = @import("batch.zig");
    _ = @import("index_check.zig");
    _ = @import("open_check.zig");
    _ = @import("store_append.zig");
    _ = @import("store_gather.zig");
    _ = @import("store_delete.zig");
    _ = @import("registry.zig");
    _ = @import("gather_streams.zig");
    _ = @import("lock.zig");
    _ = @import("no_follow.zig");
    _ = @import("compaction.zig");
    _ = @import("dictionary.zig");
    _ = @import("journal.zig");
    _ = @import("checksum.zig");
    _ = @import("integrity.zig");
    _ = @import("store_test.zig");
    _ = @import("store_delete_test.zig");
    _ = @import("store_gather_test.zig");
    _ = @import("store_space_test.zig");
    _ = @import("view.zig");
    _ = @import("lock_order.zig");
    _ = @import("runs.zig");
    _ = @import("lazy_table.zig");
    _ = @import("raw_copy.zig");
    _ = @import("record_offsets.zig");
    _ = @import("pad_rows.zig");
    _ = @import("numpy_array.zig");
    _ = @import("write_pieces.zig");
    _ = @import("sampler.zig");
    _ = @import("sampler_test.zig");
    _ = @import("c_abi/exports_test.zig");
    _ = @import("c_abi/abi_test.zig");
}
