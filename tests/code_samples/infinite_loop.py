"""Never returns."""


def attention(Q, K, V):
    while True:
        pass
