//! Module root of libloaderx: pulls in the C exports and every file's tests.
const std = @import("std");

comptime {
    // Referencing the file is what makes its `export fn`s part of the library.
    _ = @import("exports.zig");
}

test {
    // Every file with tests is listed here so `zig build test` runs them all.
    _ = @import("exports.zig");
    _ = @import("status.zig");
}
