//! Opening the log's files as an insider may have left them: only regular files, no link
//! followed, never blocking on a FIFO, so that a writer does not hang or read without end.

use std::fs::{File, OpenOptions};
use std::path::Path;

use super::LogError;

/// Opens `path` for reading if it is a regular file (not a link, a FIFO or a device: a writer
/// must not hang or read without end on what an insider put there).
pub(crate) fn regular(path: &Path) -> Result<File, LogError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(LogError::Damaged(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    Ok(file)
}
