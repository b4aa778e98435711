# gaps.py is source whose line tables need their long forms: lines more
# than 127 apart in one function, a jump over more than 255 bytes of
# bytecode, instructions with no line, comprehensions, generators and
# nested functions. TestLineTablesMatchCPython decodes what each CPython
# compiles it to.


def far_apart(x):
    a = x + 1
























































































































































    b = a * 2
    return b


def long_body(x):
    if x:
        y = [x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x]
        z = {k: v for k, v in zip(y, y)}
        return len(z) + sum(y) + max(y) + min(y) + len(y) + sum(i * i for i in y) + len([i for i in y if i])
    while x > 0:
        x -= 1
        try:
            x = x // 1
        except ZeroDivisionError:
            continue
        finally:
            x = x
    return x


def nested():
    def inner(
        a,
        b,
    ):
        return (
            a
            +
            b
        )
    return inner


class Klass:
    def method(self):
        return [lambda: i for i in range(3)]

    async def coro(self):
        async with self:
            pass
        for _ in ():
            yield
