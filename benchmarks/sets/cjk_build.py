"""Writes the knowledge bases of the judged CJK sets (``cjk-zh``, ``cjk-ja``) from a tldr-pages
checkout: every page a question is judged against, plus a seeded sample of the language's other
pages (a knowledge base of neighbours), leaving out the pages the unanswerable questions would be
answered by (``EXCLUDED``). The questions (``queries.jsonl``, ``qrels.tsv``) are written by hand.

    python benchmarks/sets/cjk_build.py <tldr .git dir>   # e.g. the fetch of github:tldr-pages/tldr
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PAGES = {"zh": 220, "ja": 160}  # pages in each knowledge base
PLATFORMS = ("common", "linux", "osx", "windows")
# what the unanswerable questions ask about: none of these pages may be in a knowledge base
EXCLUDED = {
    "kubectl", "mysql", "mysqldump", "nginx", "reg", "iptables", "ip6tables", "ufw", "firewall-cmd",
    "venv", "virtualenv", "nvidia-smi", "certbot", "mkfs", "mkfs.exfat", "mkfs.vfat", "mkfs.ext4",
    "hostnamectl", "hostname", "lscpu", "redis-cli", "uptime", "rename", "mount", "swapon", "mkswap",
    "photorec", "testdisk", "trash", "trash-cli", "nmcli", "netsh", "excel", "fstab", "docker-update",
    "docker-stats", "npm-cache", "systemd-analyze", "inxi", "neofetch", "fastfetch", "screenfetch",
    "mmv", "vidir", "f3probe", "mkfs.ntfs", "autossh", "pip-config", "conda", "pipx", "lsblk",
}  # fmt: skip


def page_ids(git_dir: str, lang: str) -> list[str]:
    listed = subprocess.run(
        ["git", f"--git-dir={git_dir}", "ls-tree", "-r", "--name-only", "HEAD", f"pages.{lang}"],
        check=True, capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    ids = [path.removeprefix(f"pages.{lang}/").removesuffix(".md") for path in listed]
    return [i for i in ids if i.split("/")[0] in PLATFORMS and i.split("/")[1] not in EXCLUDED]


def build(git_dir: str, lang: str) -> None:
    folder = HERE / f"cjk-{lang}"
    judged = {line.split("\t")[1] for line in (folder / "qrels.tsv").read_text().splitlines()[1:]}
    others = sorted(set(page_ids(git_dir, lang)) - judged)
    kept = sorted(judged | set(random.Random(0).sample(others, PAGES[lang] - len(judged))))
    for page in kept:
        text = subprocess.run(
            ["git", f"--git-dir={git_dir}", "show", f"HEAD:pages.{lang}/{page}.md"],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        platform, command = page.split("/")
        front = "\n".join(f"{k}: {json.dumps(v, ensure_ascii=False)}" for k, v in
                          {"id": page, "title": command, "category": platform}.items())  # fmt: skip
        out = folder / "pages" / f"{page}.md"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(f"---\n{front}\n---\n{text}", encoding="utf-8")
    print(f"{lang}: {len(kept)} pages ({len(judged)} judged)")


if __name__ == "__main__":
    for language in PAGES:
        build(sys.argv[1], language)
