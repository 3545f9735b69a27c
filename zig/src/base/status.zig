//! Result codes of the C ABI (mirrors `lx_status` in zig/include/loaderx.h) and the thread-local
//! message that goes with the last failure, which lx_last_error() returns. Only the export files
//! write it: the core notes its reasons in diagnostic.zig and exports_status.zig publishes them.
const std = @import("std");

pub const Status = enum(c_int) {
    ok = 0,
    invalid_argument = 1,
    index_out_of_range = 2,
    not_found = 3,
    not_a_store = 4,
    corrupt = 5,
    record_too_large = 6,
    store_full = 7,
    no_dictionary = 8,
    dictionary_exists = 9,
    codec_failed = 10,
    out_of_memory = 11,
    io = 12,
    size_mismatch = 13,
    permission_denied = 14,
    store_locked = 15,
    read_only = 16,
    too_many_open_files = 17,
    view_stale = 18,

    /// The C name of a status, for lx_status_name.
    pub fn name(status: Status) [:0]const u8 {
        return switch (status) {
            .ok => "LX_OK",
            .invalid_argument => "LX_INVALID_ARGUMENT",
            .index_out_of_range => "LX_INDEX_OUT_OF_RANGE",
            .not_found => "LX_NOT_FOUND",
            .not_a_store => "LX_NOT_A_STORE",
            .corrupt => "LX_CORRUPT",
            .record_too_large => "LX_RECORD_TOO_LARGE",
            .store_full => "LX_STORE_FULL",
            .no_dictionary => "LX_NO_DICTIONARY",
            .dictionary_exists => "LX_DICTIONARY_EXISTS",
            .codec_failed => "LX_CODEC_FAILED",
            .out_of_memory => "LX_OUT_OF_MEMORY",
            .io => "LX_IO",
            .size_mismatch => "LX_SIZE_MISMATCH",
            .permission_denied => "LX_PERMISSION_DENIED",
            .store_locked => "LX_STORE_LOCKED",
            .read_only => "LX_READ_ONLY",
            .too_many_open_files => "LX_TOO_MANY_OPEN_FILES",
            .view_stale => "LX_VIEW_STALE",
        };
    }
};

/// Number of statuses; must match LX_STATUS_COUNT in loaderx.h.
pub const status_count: c_int = 19;

comptime {
    std.debug.assert(@typeInfo(Status).@"enum".field_names.len == status_count);
}

const message_size_max = 512;
threadlocal var message_buffer: [message_size_max]u8 = undefined;
threadlocal var message_len: usize = 0;

/// Records a message for the calling thread (truncated to message_size_max - 1 bytes).
pub fn setMessage(comptime fmt: []const u8, args: anytype) void {
    const written = std.fmt.bufPrint(message_buffer[0 .. message_size_max - 1], fmt, args) catch |err| switch (err) {
        error.NoSpaceLeft => message_buffer[0 .. message_size_max - 1],
    };
    message_len = written.len;
    message_buffer[message_len] = 0;
}

pub fn clearMessage() void {
    message_len = 0;
    message_buffer[0] = 0;
}

/// The calling thread's last message as a C string.
pub fn message() [*:0]const u8 {
    if (message_len == 0) return "";
    return @ptrCast(&message_buffer);
}

test "status names are distinct and messages are thread-local strings" {
    try std.testing.expectEqualStrings("LX_OK", Status.ok.name());
    try std.testing.expectEqualStrings("LX_CORRUPT", Status.corrupt.name());
    setMessage("record {d} is {d} bytes", .{ 7, 12 });
    try std.testing.expectEqualStrings("record 7 is 12 bytes", std.mem.span(message()));
    clearMessage();
    try std.testing.expectEqualStrings("", std.mem.span(message()));
}
