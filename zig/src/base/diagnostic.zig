//! The core's diagnostic: a sentence saying why the last operation on this thread failed.
//!
//! The engine (store, meta, chunk, view, lock, ...) returns an error from errors.Error and notes
//! its diagnostic here; it never writes what a C caller reads. exports_status.zig alone turns
//! the pair into the C ABI's answer: a status and the message lx_last_error() returns
//! (status.zig).
const std = @import("std");

const text_size_max = 512;
threadlocal var text_buffer: [text_size_max]u8 = undefined;
threadlocal var text_len: usize = 0;

/// Notes why the current operation fails (truncated to text_size_max - 1 bytes).
pub fn note(comptime fmt: []const u8, args: anytype) void {
    const written = std.fmt.bufPrint(text_buffer[0 .. text_size_max - 1], fmt, args) catch |err| switch (err) {
        error.NoSpaceLeft => text_buffer[0 .. text_size_max - 1],
    };
    text_len = written.len;
    text_buffer[text_len] = 0;
}

pub fn clear() void {
    text_len = 0;
    text_buffer[0] = 0;
}

/// The calling thread's last diagnostic ("" when none), valid until its next note.
pub fn text() [:0]const u8 {
    if (text_len == 0) return "";
    return text_buffer[0..text_len :0];
}

test "a diagnostic is the thread's last note" {
    note("record {d} is {d} bytes", .{ 7, 12 });
    try std.testing.expectEqualStrings("record 7 is 12 bytes", text());
    clear();
    try std.testing.expectEqualStrings("", text());
}
