"""Reads an iOS device backup folder with independent readers and prints what they found as JSON.

  read-device-backup.py FOLDER [PASSWORD]

- "entries": every Manifest.db entry as pyiosbackup reads it (domain, path, kind, mode, size,
  whole-second mtime, and the SHA-256 of a file's decrypted content);
- "decrypted" (encrypted backups only): iphone_backup_decrypt's reading of every file, as the
  SHA-256 of its bytes by "domain/path"; "protection": each file's ProtectionClass as it reads
  it; and "extracted": the files its extract_files wrote, with their SHA-256 and mtime.
The tests compare this with the tree appbox exported (EndToEndTests/DeviceBackupEndToEndTests).
"""

import hashlib
import json
import os
import sys
import tempfile

from pyiosbackup import Backup


def digest(data):
    return hashlib.sha256(data).hexdigest()


def main():
    folder = sys.argv[1]
    password = sys.argv[2] if len(sys.argv) > 2 else ""
    backup = Backup.from_path(folder, password)
    entries = []
    for entry in backup.iter_entries():
        kind = "file" if entry.is_file() else "directory" if entry.is_dir() else "symlink"
        item = {
            "domain": entry.domain,
            "path": entry.relative_path,
            "kind": kind,
            "mode": entry.mode,
            "size": entry.size,
            "mtime": int(entry.last_modified.timestamp()),
        }
        if entry.is_file():
            item["sha256"] = digest(entry.read_bytes())
        entries.append(item)
    result = {"encrypted": backup.is_encrypted, "entries": entries}
    if password:
        from iphone_backup_decrypt import EncryptedBackup
        from iphone_backup_decrypt.utils import FilePlist

        decrypted = EncryptedBackup(backup_directory=folder, passphrase=password)
        with decrypted.manifest_db_cursor() as cursor:
            cursor.execute("SELECT domain, relativePath, file FROM Files WHERE flags = 1")
            rows = cursor.fetchall()
        files = [(domain, path) for domain, path, _ in rows]
        result["protection"] = {
            domain + "/" + path: FilePlist(blob).protection_class for domain, path, blob in rows
        }
        result["decrypted"] = {
            domain + "/" + path: digest(decrypted.extract_file_as_bytes(path, domain_like=domain))
            for domain, path in files
        }
        extracted = {}
        with tempfile.TemporaryDirectory() as output:
            decrypted.extract_files(
                relative_paths_like="%", domain_like="AppDomain-%", output_folder=output,
                preserve_folders=True, domain_subfolders=True)
            for directory, _, names in os.walk(output):
                for name in names:
                    path = os.path.join(directory, name)
                    with open(path, "rb") as handle:
                        extracted[os.path.relpath(path, output)] = {
                            "sha256": digest(handle.read()), "mtime": int(os.stat(path).st_mtime)}
        result["extracted"] = extracted
    json.dump(result, sys.stdout)


main()
