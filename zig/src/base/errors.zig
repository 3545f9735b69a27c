//! The store's error set, the narrowing of std's I/O errors into it, and the one exhaustive
//! mapping from it to the C ABI's statuses.
const std = @import("std");
const diagnostic = @import("diagnostic.zig");
const status = @import("status.zig");
const Status = status.Status;

/// Every way a store operation can fail. Each failure also sets the thread's message.
pub const Error = error{
    InvalidArgument,
    IndexOutOfRange,
    NotFound,
    NotAStore,
    Corrupt,
    RecordTooLarge,
    StoreFull,
    NoDictionary,
    DictionaryExists,
    CodecFailed,
    OutOfMemory,
    Io,
    SizeMismatch,
    PermissionDenied,
    StoreLocked,
    ReadOnly,
    /// The process is out of file descriptors (EMFILE): its soft RLIMIT_NOFILE was reached.
    TooManyOpenFiles,
    /// A view's routing no longer matches its stores (a store other than the last changed
    /// length since the view was made): the caller makes a new view and calls again.
    ViewStale,
};

/// The one mapping to statuses: exhaustive and without `else`, so a new error cannot compile
/// until it has a status.
pub fn toStatus(err: Error) Status {
    return switch (err) {
        error.InvalidArgument => .invalid_argument,
        error.IndexOutOfRange => .index_out_of_range,
        error.NotFound => .not_found,
        error.NotAStore => .not_a_store,
        error.Corrupt => .corrupt,
        error.RecordTooLarge => .record_too_large,
        error.StoreFull => .store_full,
        error.NoDictionary => .no_dictionary,
        error.DictionaryExists => .dictionary_exists,
        error.CodecFailed => .codec_failed,
        error.OutOfMemory => .out_of_memory,
        error.Io => .io,
        error.SizeMismatch => .size_mismatch,
        error.PermissionDenied => .permission_denied,
        error.StoreLocked => .store_locked,
        error.ReadOnly => .read_only,
        error.TooManyOpenFiles => .too_many_open_files,
        error.ViewStale => .view_stale,
    };
}

/// Sets the thread's message and returns error.OutOfMemory.
pub fn outOfMemory() Error {
    diagnostic.note("out of memory", .{});
    return error.OutOfMemory;
}

/// Narrows an error from std (file, directory, mapping) into the store's set. Only the errors
/// that say something a caller can act on keep their identity; the rest are plain I/O failures
/// (their name goes into the message).
pub fn fromStd(err: anyerror) Error {
    return switch (err) {
        error.FileNotFound => error.NotFound,
        error.AccessDenied, error.PermissionDenied, error.ReadOnlyFileSystem => error.PermissionDenied,
        error.OutOfMemory => error.OutOfMemory,
        // Only the process's own limit: raising it can help (the system-wide table cannot).
        error.ProcessFdQuotaExceeded => error.TooManyOpenFiles,
        else => error.Io,
    };
}

test "every error maps to a distinct status" {
    const names = @typeInfo(Error).error_set.error_names.?;
    var seen = std.EnumSet(Status).empty;
    inline for (names) |name| {
        const s = toStatus(@field(anyerror, name));
        try std.testing.expect(!seen.contains(s));
        seen.insert(s);
    }
    try std.testing.expect(!seen.contains(.ok));
}

test "out of descriptors keeps its identity only for the process's own limit" {
    try std.testing.expectEqual(error.TooManyOpenFiles, fromStd(error.ProcessFdQuotaExceeded));
    try std.testing.expectEqual(Status.too_many_open_files, toStatus(fromStd(error.ProcessFdQuotaExceeded)));
    // The system-wide table (ENFILE) is not this process's to raise: a plain I/O failure.
    try std.testing.expectEqual(error.Io, fromStd(error.SystemFdQuotaExceeded));
}
