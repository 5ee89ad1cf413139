#!/usr/bin/env python3
"""Drives N new-key pays against a running payonce-server --dev (as payonce-bench does):
setup (not counted): a dev session and an order per pay; then hooks (`--before CMD`), the
pays from C threads each on one keep-alive connection, then `--after CMD`."""
import argparse, http.client, json, subprocess, threading, time, uuid
p = argparse.ArgumentParser()
p.add_argument('--api', required=True)  # host:port
p.add_argument('-n', type=int, default=200)
p.add_argument('-c', type=int, default=4)
p.add_argument('--before', default='')
p.add_argument('--after', default='')
a = p.parse_args()
SKUS = ["hoodie-zip", "mug-enamel", "sticker-pack", "tee-classic"]
host, port = a.api.split(':')
def conn(): return http.client.HTTPConnection(host, int(port), timeout=60)
def req(c, method, path, body=None, headers={}):
    h = {'content-type': 'application/json', **headers}
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
    r = c.getresponse(); d = r.read()
    return r.status, d
c = conn()
jobs = []
tag = uuid.uuid4().hex[:8]
for j in range(a.n):
    s, d = req(c, 'POST', '/dev/sessions', {'userId': f'drv-{tag}-{j}'})
    tok = json.loads(d)['token']
    s, d = req(c, 'POST', '/orders', {'items': [{'sku': SKUS[j % 4], 'quantity': 1}]}, {'authorization': f'Bearer {tok}'})
    assert s == 201, (s, d)
    jobs.append((tok, json.loads(d)['id']))
if a.before: subprocess.run(a.before, shell=True, check=True)
errors = []
lat = []
def worker(w):
    cc = conn()
    for j in range(w, a.n, a.c):
        tok, oid = jobs[j]
        t = time.perf_counter()
        s, d = req(cc, 'POST', f'/orders/{oid}/pay', {'orderVersion': 1, 'paymentMethodId': 'pm_card_approve'},
                   {'authorization': f'Bearer {tok}', 'Idempotency-Key': str(uuid.uuid4())})
        lat.append(time.perf_counter() - t)
        if s != 200: errors.append((s, d[:200]))
t = time.perf_counter()
ts = [threading.Thread(target=worker, args=(w,)) for w in range(a.c)]
[x.start() for x in ts]; [x.join() for x in ts]
el = time.perf_counter() - t
if a.after: subprocess.run(a.after, shell=True, check=True)
lat.sort()
print(json.dumps({'pays': a.n, 'errors': len(errors), 'first_error': str(errors[0]) if errors else None,
                  'secs': round(el, 2), 'per_s': round(a.n / el, 1), 'p50_ms': round(lat[len(lat)//2]*1000, 2),
                  'p99_ms': round(lat[int(len(lat)*0.99)]*1000, 2)}))
