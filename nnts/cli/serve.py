"""``nnts serve DRIVER``: one driver served over the remote-driver protocol (docs/remote-protocol.md),
on stdin/stdout or a Unix socket."""
from __future__ import annotations

import faulthandler
import signal

from threadpoolctl import threadpool_limits

from nnapi_ref.remote.server import check_socket_path, serve_socket, serve_stdio
from nnts.formats import files
from nnts.formats.files import UsageError
from nnts.runners.drivers import load_driver


def register(sub) -> None:
    p = sub.add_parser("serve", help="serve a driver to remote clients (remote:nnts serve DRIVER, socket:PATH)")
    p.add_argument("driver", help="reference, or module.path:factory")
    p.add_argument("--socket", help="listen on this Unix socket instead of speaking on stdin/stdout (mode 0600: "
                                    "this user's and root's clients only)")
    p.add_argument("--allow-other-users", action="store_true",
                   help="let every local user's clients connect to --socket (mode 0666, no peer check): a client "
                        "makes the server open the files it names, as the server's user")
    p.add_argument("--blas-threads", type=int, default=1, metavar="N",
                   help="threads of numpy's BLAS in the server (default 1, as nnts bench runs the driver "
                        "in process: several served drivers at BLAS's default oversubscribe the CPUs)")
    p.set_defaults(func=run, check_args=check)


def check(args) -> None:
    files.positive("--blas-threads", args.blas_threads)
    if args.socket is not None:
        try:
            check_socket_path(args.socket)
        except ValueError as e:
            raise UsageError(str(e)) from None


def run(args) -> int:
    if args.socket:  # SIGTERM (docker stop, a CI timeout) ends the server as Ctrl-C does: the socket is removed
        signal.signal(signal.SIGTERM, signal.default_int_handler)
    faulthandler.enable(file=2, all_threads=False)  # a driver that crashes the process: its stack in the client's report
    # numpy's BLAS on the given threads: each served driver defaulting to one thread per core
    # oversubscribed the machine (MobileNet served: p50 992 ms against 116 ms on one thread).
    with threadpool_limits(limits=args.blas_threads):
        device = load_driver(args.driver, settings=args.settings)
        if args.socket:
            try:
                serve_socket(device, args.socket, args.allow_other_users)
            except KeyboardInterrupt:
                pass
            except ValueError as e:  # the path changed since it was checked
                raise UsageError(str(e)) from None
        else:
            serve_stdio(device)
    return 0
