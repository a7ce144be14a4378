# Sends or receives N bytes over TCP and prints the byte count or the seconds it took (netns test helper).
import socket, sys, time, threading
mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "serve":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((host, port)); s.listen(1)
    c, _ = s.accept(); n = 0
    while True:
        b = c.recv(65536)
        if not b: break
        n += len(b)
    print(n)
else:
    nbytes = int(sys.argv[4])
    c = socket.create_connection((host, port), timeout=30)
    t = time.time(); c.sendall(b"x" * nbytes); c.shutdown(socket.SHUT_WR); c.recv(1); print(f"{time.time()-t:.2f}")
